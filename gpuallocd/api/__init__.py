"""The socket and the HTTP API in front of the allocator.

server.py      the Unix socket: bind with mode and group, serve, shut down with a grace period
peercred.py    the caller, from the kernel (SO_PEERCRED)
app.py         the aiohttp application behind one error envelope
routes.py      the `/v1` routes: each one call into the allocator's façade
admin_routes.py        drain, undrain, limits, usage, admin actions
usage_view.py          usage's figures for one user alone
enforcement_routes.py  adopt, unleased use
reservation_routes.py  advance reservations
ledger_routes.py       the ledger's backups, for admins
notice_routes.py       the notices' feed, thresholds and delivery reports, each user's own
preemption_routes.py   preemptible requests' fields, an admin's preemption, a job's checkpoint
requests.py    what every route reads from its request, read one way
limits.py      connection limits: no local user takes the daemon's file descriptors
validation.py  a JSON body into typed values, or a stable error
context.py     what the routes share
tcp_site.py    the TCP ports beside the socket (metrics, dashboard), under its connection rules
tcp_address.py HOST:PORT for those ports, and whether a host is this machine only
tcp_peers.py   who owns the other end of a loopback TCP connection (the kernel's sock_diag)
"""
