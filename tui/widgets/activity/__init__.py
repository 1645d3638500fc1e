"""The lower region: uploads and the recent events."""
