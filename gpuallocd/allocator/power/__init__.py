"""What a lease does to its GPUs besides holding them: energy drawn, power caps, and the
box's power budget (docs/accounting.md).

    hardware.py         LeaseHardware: a grant fits the power budget, gets its cap, and its
                        GPUs' energy counters are read at grant and at end
    energy.py           EnergyMeter: energy of leases and of unleased use from the GPUs'
                        counters (a counter that goes back is a driver reload, not negative
                        energy)
    split.py            who a GPU's energy is charged to at one sample: its leases, and the
                        users whose processes use it without a lease there, by memory
    presence.py         each GPU's parts summed over the live samples since its last reading
    caps.py             PowerCaps: each leased GPU's limit set for the lease, put back after
    budget.py           PowerBudget: power as an allocatable resource of the box
    never_fits.py       a request no idle box could power: refused, naming the cap that fits

Imports nothing of the other rooms.
"""
