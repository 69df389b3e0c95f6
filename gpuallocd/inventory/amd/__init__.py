"""The AMD backend over amdsmi (extra `gpuallocd[amd]`).

backend.py    AmdInventory: the Inventory protocol over amdsmi
gate.py       the one module that loads amdsmi; errors become InventoryError
"""
