"""Speculative decoding (chapter 9): the analytic model, the real demo on this CPU, drafts without a draft model."""
