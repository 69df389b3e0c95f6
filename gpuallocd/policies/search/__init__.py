"""The exact subset search behind the topology-aware policies.

picker.py     the objective: highest set score, then least damage, then lowest indices
engine.py     branch and bound over classes of interchangeable GPUs, seeded greedily
classes.py    grouping GPUs that no pick can tell apart
"""
