"""Pure simulations: numpy and the standard library only, no web imports (a test enforces it)."""
