"""Models written the way their upstream projects write them, for end-to-end tests."""
