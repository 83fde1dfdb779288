"""Selection: the shared filter flags and the time forms they accept."""
