"""Solvers: pure functions from typed problems (arrays) to typed solutions. Imports none of ours."""
