"""The main screen's widgets, grouped by the region of the screen they draw."""
