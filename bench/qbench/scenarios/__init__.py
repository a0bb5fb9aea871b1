"""One module per scenario, each with run(suite)."""
