"""The façade and its desks: the allocator's door, one desk per API area.

    facade.py      AllocatorFacade: one method, one whole operation; it builds the desks
                   below and hands each the parts it uses
    scheduling.py  the queue's order and fair-share use, advance reservations
    accounting.py  the record: history, usage, limits, what admins did
    gpus.py        the GPUs: status, drain, root's release, a rediscovered topology
    gpu_admin.py   drain, undrain and root's release of a GPU (the GPU desk's work)
    energy.py      energy: the timer's readings, written in one transaction
    power.py       power caps: a grant answered once its cap is set, limits put back

A desk runs its work through the serial worker (`worker.py`, at the allocator's top) like
every allocator call. Desks may import every room of the allocator and the modules at its
top; no room and no module at the top imports a desk (tests/test_architecture.py).
"""
