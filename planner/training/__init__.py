"""Training plans: degree search, solve, stage placement, layer slicing, estimates."""
