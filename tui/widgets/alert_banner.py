"""The banner across the screen for what must not be missed: paused, FAILED, uploads stopped,
disconnected. Hidden when there is nothing to say; one full-width line per alert."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import Static

from tui.alerts import Alert


class AlertBanner(Widget):
    # recompose: alerts change rarely (a pause, a failure), and each is its own line.
    alerts: reactive[tuple[Alert, ...]] = reactive((), recompose=True)

    def compose(self) -> ComposeResult:
        for a in self.alerts:
            yield Static(a.text, classes=f"alert -{a.severity.value}", markup=False)

    def watch_alerts(self, alerts: tuple[Alert, ...]) -> None:
        self.display = bool(alerts)
