"""This CPU measured: its memory and compute roofs, and the demo and served models timed on it."""
