"""Store access: opening a state.db, reading its sessions, and writing in short transactions."""
