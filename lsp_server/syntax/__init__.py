"""Where is the cursor? tree-sitter context and the draft policy table. Never imports torch."""
