"""git, behind one owner: clones, fetches and object reads through GitPython in a scrubbed environment."""
