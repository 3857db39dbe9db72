"""What goes into a prompt: the FIM window around the cursor (`prompt`), snippets from other
files (`snippets`, `cross_file`), and the clean-up of what comes back (`postprocess`).
Never imports torch."""
