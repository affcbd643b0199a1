"""One thin router per chapter: query params -> params model -> sim -> response model."""
