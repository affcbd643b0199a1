"""The calibrated roofline cost model and what is priced with it: chapters 4, 5, 10, 11 and the launch explainer."""
