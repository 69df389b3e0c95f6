"""Leasing commands: take GPUs, run on them, give them back (docs/cli.md, "Leasing").

leases.py        leases, allocate, renew, free, revoke
dry_run.py       allocate --dry-run: what the daemon would do with the request now
run.py           run, shell: a lease for one command (their options, read by click)
runner.py        what run and shell do once their options are read, without click
quick_run.py     the plain forms of run, read without click (how jobs start)
revoke_watch.py  run hears its own revoke and stops its command
preempted.py     run --preemptible and --requeue: the preemption file, the supervisor
preempt.py       preempt (admins), checkpoint-done (a preemptible job's acknowledgement)
waiting.py       the line shown while a request waits, and a clean Ctrl-C
adopt.py         adopt, unleased: work already running becomes a lease
agents.py        mcp: an MCP server on stdio, so an agent leases as its user
"""
