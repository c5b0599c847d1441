"""How every run ends, whoever started it: one finish (write-back, history, figures, reports)."""
