"""One construct module per resource concern; IAM passed in as data (role -> members)."""
