"""How every run ends, whoever started it: one finish (the write, history, figures, reports)."""
