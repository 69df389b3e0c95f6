"""Commands that need no daemon (docs/cli.md, "Without a daemon").

plan.py      plan, simulate, policy-bench
sim_text.py  simulate's side-by-side trace
meta.py      completion, policies
"""
