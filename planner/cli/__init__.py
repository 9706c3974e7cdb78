"""The typer app: one module per command group; the only place that wires every room together."""
