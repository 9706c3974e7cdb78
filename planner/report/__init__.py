"""Terminal reports, one module per report; they format what they are given and compute nothing."""
