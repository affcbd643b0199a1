"""Shared leaves of every simulation: SimError (errors), a result's one form (result), show-the-math (derivation)."""
