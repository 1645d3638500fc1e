"""A widget that is one block of text drawn from the latest status, as tall as its text."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Size
from textual.reactive import reactive
from textual.widget import Widget

from supervisor.contract.status import Status


class StatusText(Widget):
    """Subclasses say what to show in `text(width)`; the height follows the wrapped text."""

    status: reactive[Status | None] = reactive(None)
    _lines = 0

    def watch_status(self) -> None:
        # The height is auto: lay the screen out again only when the number of lines
        # changes (a wrap, an error line), not on every snapshot (a layout costs far more).
        lines = self.get_content_height(self.size, self.size, self.size.width)
        if lines != self._lines:
            self._lines = lines
            self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # Lines depend on the width (figures wrap between, never inside, themselves): lay
        # out for the width Textual offers, not the size the widget had before.
        return len(self.text(width).wrap(self.app.console, max(1, width)))

    def render(self) -> Text:
        return self.text(self.size.width)

    def text(self, width: int) -> Text:
        raise NotImplementedError
