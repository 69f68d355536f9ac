"""Worker processes for bulk work, and what a process leaves behind when it ends."""
