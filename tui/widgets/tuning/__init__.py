"""The tuning screen's regions: the search's summary and its table of trials."""
