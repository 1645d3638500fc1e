"""One row per server: its state, its GPUs' power, temperature and memory, its share of the work, and
why it last died. The selected row is what the server keys act on; the keys post messages
(`ServerTable.RestartRequested`, ...) and the screen decides what to do with them."""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable

from supervisor.client.text import duration, limit_text
from supervisor.contract.status import GpuStatus, ServerState, ServerStatus, Status
from tui.formatting import gib, one_line
from tui.widgets.servers.column_fit import LAST, fit_columns

STATE_STYLE = {
    ServerState.READY: "green",
    ServerState.STARTING: "yellow",
    ServerState.DRAINING: "yellow",
    ServerState.STOPPING: "yellow",
    ServerState.STOPPED: "dim",
    ServerState.BACKOFF: "bold dark_orange",
    ServerState.FAILED: "bold white on red",
    # An attached server that went away (unreachable, unhealthy or hung): not ours to
    # restart, so not FAILED's alarm red, but as loud as a back-off.
    ServerState.GONE: "bold magenta",
}

# (key, heading): the order an operator scans a row in; the long reason goes last.
COLUMNS = (
    ("server", "server"), ("state", "state"), ("in_flight", "in fl"), ("req_s", "req/s"),
    ("power", "power W"), ("util", "util"), ("temp", "°C"), ("memory", "mem GiB"),
    ("restarts", "rst"),
    ("uptime", "up"), ("last_exit", "last exit"),
)


# SGLang's own figures (its /metrics, with --enable-metrics), after "in fl": the column is
# there only while some server has them, so a job without metrics keeps the narrower table.
SGLANG_COLUMN = ("sglang", "sgl run/q kv")
OVERCOMMIT_STYLE = "bold dark_orange"


def columns_for(servers: tuple[ServerStatus, ...]) -> tuple[tuple[str, str], ...]:
    if not any(s.sglang_metrics for s in servers):
        return COLUMNS
    at = [key for key, _ in COLUMNS].index("in_flight") + 1
    return COLUMNS[:at] + (SGLANG_COLUMN,) + COLUMNS[at:]


# A sample older than this many scrape intervals is stale: the scrape after it is late (a
# busy server answers /metrics slowly) and the figures may no longer hold.
STALE_INTERVALS = 2.0
SECONDARY_STYLE = "dim"


def sglang_stale(server: ServerStatus) -> bool:
    age, interval = server.sglang_age_s, server.sglang_interval_s
    return age is not None and interval is not None and age > STALE_INTERVALS * interval


def sglang_cell(server: ServerStatus, paused: bool = False) -> Text | str:
    """`52/8 91%`: SGLang running/queued and KV cache use; `↺12/m` when it retracts; the
    whole cell in orange with `OVER` while it is over-committed; "n/a" where SGLang gave no
    figure, "—" where its metrics are not read. Dim, with the sample's age (`12s old`), when
    the sample is older than two scrapes; while dispatch is paused, `still 26/0`, dim:
    SGLang goes on running what was sent before the pause (and counts every request it
    holds, aborted ones it is still finishing included), while `in fl` is ours alone."""
    if not server.sglang_metrics:
        return "—"
    figures = server.sglang_running is not None or server.sglang_queued is not None
    if not figures:
        text = "n/a"
    else:
        def n(v: int | None) -> str:
            return "?" if v is None else str(v)
        text = f"{n(server.sglang_running)}/{n(server.sglang_queued)}"
        text += " n/a" if server.token_usage is None else f" {100 * server.token_usage:.0f}%"
    rate = server.retractions_per_s
    if rate:
        text += f" ↺{rate * 60:.0f}/m"
    still = paused and (server.sglang_running or 0) > 0
    if still:
        text = f"still {text}"
    stale = figures and sglang_stale(server)
    if stale:
        text += f" {duration(server.sglang_age_s or 0.0)} old"
    if server.overcommitted:
        return Text(f"{text} OVER", style=OVERCOMMIT_STYLE)
    if still or stale:
        return Text(text, style=SECONDARY_STYLE)
    return text


def in_flight_cell(server: ServerStatus) -> Text | str:
    """`18/24`: requests in flight of the limit; `18/20↓` in orange while the saturation
    guard holds the limit below the server's max (the status text says why); `18/24 5w`
    when 5 of them wait (silent while the server streams for others: queued or retracted
    by SGLang, not stalled)."""
    text = f"{server.in_flight}/{limit_text(server)}"
    if server.waiting:
        text += f" {server.waiting}w"
    lim = server.inflight_limit
    if lim is not None and lim < server.max_running:
        return Text(text, style=OVERCOMMIT_STYLE)
    return text


# Where datacenter GPUs start to slow themselves down (H100/A100 throttle from about 85 °C).
HOT_C = 85.0


def gpu_cells(server: ServerStatus,
              gpus: dict[int, GpuStatus]) -> tuple[str, str, Text | str, str]:
    """Power used/limit, utilisation, the hottest GPU's temperature and memory used/total,
    over the server's GPUs (a tensor-parallel server spans several); "n/a" where the driver
    gave nothing."""
    mine = [gpus[i] for i in server.gpus if i in gpus]
    if not mine:
        return "n/a", "n/a", "n/a", "n/a"

    def total(values: list[float | int | None]) -> float | None:
        return None if any(v is None for v in values) else float(sum(v or 0 for v in values))

    power = total([g.power_w for g in mine])
    limit = total([g.power_limit_w for g in mine])
    util = total([g.utilization_pct for g in mine])
    used = total([g.memory_used_bytes for g in mine])
    cap = total([g.memory_total_bytes for g in mine])
    power_s = "n/a" if power is None else f"{power:.0f}" + ("" if limit is None else f"/{limit:.0f}")
    util_s = "n/a" if util is None else f"{util / len(mine):.0f}%"
    mem_s = "n/a" if used is None else gib(int(used)) + ("" if cap is None else f"/{gib(int(cap))}")
    temps = [g.temperature_c for g in mine]
    temp: Text | str = "n/a"
    if all(t is not None for t in temps):
        hottest = max(t for t in temps if t is not None)
        temp = Text(f"{hottest:.0f}", style="bold red" if hottest >= HOT_C else "")
    return power_s, util_s, temp, mem_s


def row_cells(server: ServerStatus, gpus: dict[int, GpuStatus],
              paused: bool = False) -> dict[str, Text | str]:
    power, util, temp, mem = gpu_cells(server, gpus)
    if server.tokens_per_joule is not None and power != "n/a":
        power = f"{power} {server.tokens_per_joule:.1f}t/J"
    exit_reason = one_line(server.last_exit_reason or "", 60) or "—"
    if server.attached_url is not None:
        # Never launched here, so no exit: where it is, and while GONE since when and why
        # ("unreachable since 12:03:41: connection refused").
        exit_reason = one_line(server.state_reason if server.state is ServerState.GONE
                               else f"attached {server.attached_url}", 60)
    return {
        "server": server.name,
        "state": Text(server.state.value, style=STATE_STYLE.get(server.state, "")),
        "in_flight": in_flight_cell(server),
        "sglang": sglang_cell(server, paused),
        "req_s": f"{server.req_per_s:.1f}",
        "power": power,
        "util": util,
        "temp": temp,
        "memory": mem,
        "restarts": Text(str(server.restarts), style="bold" if server.restarts else "dim"),
        "uptime": duration(server.uptime_s) if server.uptime_s is not None else "—",
        "last_exit": exit_reason,
    }


class ServerTable(DataTable[Text | str]):
    BINDINGS = [
        Binding("r", "restart", "restart", tooltip="restart the selected server (confirm)"),
        Binding("f", "reset", "reset FAILED",
                tooltip="start a FAILED server again, its failures cleared (confirm)"),
        Binding("t", "retune", "retune",
                tooltip="change SGLang flags: the selected server or all, rolling"),
        # Enter does it too; the help screen lists it.
        Binding("l", "log", "log", show=False, tooltip="the selected server's log"),
        Binding("j", "cursor_down", show=False),
        Binding("k", "cursor_up", show=False),
    ]

    status: reactive[Status | None] = reactive(None)

    class ServerRequest(Message):
        """Base: the operator asked for something about `server` (the selected row)."""

        def __init__(self, server: ServerStatus) -> None:
            super().__init__()
            self.server = server

    class RestartRequested(ServerRequest):
        """Restart the selected server (drain, stop, start)."""

    class ResetRequested(ServerRequest):
        """Clear a FAILED server's failure history so it starts again."""

    class RetuneRequested(ServerRequest):
        """Change SGLang flags, starting from the selected server's current ones."""

    class LogRequested(ServerRequest):
        """Show the selected server's log."""

    def __init__(self, readonly: bool = False, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self.readonly = readonly
        self._reset_offered = False
        self._columns = COLUMNS
        self._reason_width: int | None = None
        for key, heading in COLUMNS:
            self.add_column(heading, key=key)

    @property
    def selected(self) -> ServerStatus | None:
        s = self.status
        if s is None or not s.servers or not self.row_count:
            return None
        key = self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value
        return s.server(key) if key is not None else None

    def watch_status(self, status: Status | None) -> None:
        self._show(status)

    def on_resize(self) -> None:
        # The columns follow the width: a narrower terminal drops some, a wider one gets
        # them back.
        self._show(self.status)

    def _show(self, status: Status | None) -> None:
        servers = status.servers if status is not None else ()
        gpus = {g.index: g for g in status.gpus.gpus} if status is not None else {}
        names = [s.name for s in servers]
        current = [str(k.value) for k in self.rows]
        paused = status is not None and bool(status.paused)
        rows = {s.name: row_cells(s, gpus, paused) for s in servers}
        width = self.scrollable_content_region.width if self.is_mounted else None
        fit = fit_columns(columns_for(servers), list(rows.values()), width)
        columns = fit.columns
        if fit.reason_width is not None:
            for cells in rows.values():
                cells[LAST] = one_line(str(cells[LAST]), fit.reason_width)
        # A column never narrows by itself: a new set of columns, or less room for the exit
        # reason, rebuilds them.
        new_columns = (columns, fit.reason_width) != (self._columns, self._reason_width)
        if names != current or new_columns:
            # Servers come and go only at start or with a config change: rebuild, keeping
            # the cursor on the server it was on.
            selected = self.selected.name if self.selected else None
            self.clear(columns=new_columns)
            if new_columns:
                self._columns, self._reason_width = columns, fit.reason_width
                for key, heading in columns:
                    self.add_column(heading, key=key)
            for s in servers:
                cells = rows[s.name]
                self.add_row(*(cells[k] for k, _ in columns), key=s.name)
            if selected in names:
                self.move_cursor(row=names.index(selected), animate=False)
            self.styles.max_height = len(names) + 1   # the header and every row
        else:
            shown = {key for key, _ in self._columns}
            for s in servers:
                for key, value in rows[s.name].items():
                    if key not in shown:
                        continue
                    if self.get_cell(s.name, key) != value:
                        # update_width: a column grows with its values (uptime 9s -> 1h02m).
                        self.update_cell(s.name, key, value, update_width=True)
        self._offer_reset()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._offer_reset()

    def _offer_reset(self) -> None:
        # "Reset FAILED" is offered only on a FAILED row: the footer follows the cursor and
        # the state. Only on a change: refreshing the bindings rebuilds the footer.
        sel = self.selected
        failed = sel is not None and sel.state is ServerState.FAILED
        if failed != self._reset_offered:
            self._reset_offered = failed
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("restart", "reset", "retune"):
            if self.readonly:
                return False
            if action == "reset":
                sel = self.selected
                # Offered only on a FAILED row (the help screen lists it always).
                return sel is not None and sel.state is ServerState.FAILED
        return True

    def _request(self, message: type[ServerRequest]) -> None:
        server = self.selected
        if server is not None:
            self.post_message(message(server))

    def action_restart(self) -> None:
        self._request(self.RestartRequested)

    def action_reset(self) -> None:
        self._request(self.ResetRequested)

    def action_retune(self) -> None:
        self._request(self.RetuneRequested)

    def action_log(self) -> None:
        self._request(self.LogRequested)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        # Enter on a row opens its log, as in k9s.
        event.stop()
        self._request(self.LogRequested)
