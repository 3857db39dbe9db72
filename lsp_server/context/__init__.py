"""What goes into a prompt beyond the cursor's own window (no torch)."""
