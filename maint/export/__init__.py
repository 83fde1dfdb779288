"""Export: choosing sessions, rendering them, writing files safely, and what follows (upload, delete)."""
