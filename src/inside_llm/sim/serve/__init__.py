"""The serving core: requests, the KV manager, the scheduler, its clocks, the step log and its records.

Chapter 6 (sim/serve/kvpolicies.py) and chapter 7 (simulate.py's simulate_batching) run on it. Reading order:
simulate -> scheduler -> records -> steplog -> kv, requests; clocks execute the scheduler's plans.
"""
