"""Looking commands: the box, the queue, the record (docs/cli.md, "Looking").

status.py            status: every GPU as gpustat shows it
queue.py             queue and history
limits.py            limits and usage
usage_plot.py        usage --plot FILE: GPU-hours per user per day as SVG or PNG
plot_file.py         a new file written in place without following a link there
watch.py             redraw a frame until Ctrl-C
reservation_text.py  fair-share priorities and advance reservations as text
"""
