"""Where the shards go and how far behind the uploads are."""

from __future__ import annotations

from rich.text import Text

from tui.formatting import ago, one_line, size
from tui.text_flow import figure, flow
from tui.widgets.status_text import StatusText


class UploadPanel(StatusText):
    def text(self, width: int) -> Text:
        s = self.status
        head = Text("uploads", style="bold")
        if s is None:
            return flow([head], width)
        u = s.uploads
        if u is None:
            return flow([head, Text("none: this job's output needs no upload", style="dim")],
                        width)
        cells = [head, Text(f"→ {u.destination}")]
        if u.remote:
            cells.append(figure(f"{u.backlog_shards} ({size(u.backlog_bytes)})", "backlog",
                                label_first=True,
                                style="bold yellow" if u.backlog_shards > 8 else None))
            cells.append(Text(f"{size(u.bytes_per_s)}/s", style="bold"))
        cells.append(figure(f"{u.uploaded_shards} ({size(u.uploaded_bytes)})", "done",
                            label_first=True))
        cells.append(figure(ago(u.last_success_at, s.time), "last", label_first=True))
        if u.consecutive_failures:
            cells.append(Text(f"failing ×{u.consecutive_failures}", style="bold red"))
        if u.corrupt_total:
            cells.append(Text(f"re-sent {u.corrupt_total} altered", style="yellow"))
        text = flow(cells, width)
        if u.last_error and (u.consecutive_failures or u.stopped):
            text.append(f"\n last error: {one_line(u.last_error, max(20, width - 14))}",
                        style="red")
        return text
