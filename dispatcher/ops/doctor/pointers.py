"""Doctor's check that every registration, hook, status line and unit setting of ours names the
store in use (a registration made in another shell may name another store)."""

from dispatcher.core.findings import Finding, finding
from dispatcher.core.locations import default_db, redacted, shown
from dispatcher.ops import store_pointers as sp
from dispatcher.ops.doctor.context import Context


def check_store_pointers(ctx: Context) -> list[Finding]:
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    pointers = [p for path in sp.registration_files() for p in sp.file_pointers(path)] + sp.unit_pointers(agents)
    if not pointers:
        return []
    store = shown(ctx.locations.db)
    wrong = [p for p in pointers if not sp.points_at(p, ctx.locations.db)]
    if not wrong:
        entries = f"{len(pointers)} {'entry' if len(pointers) == 1 else 'entries'}"
        return [
            finding("registrations_ok", f"our registrations, hooks and status line name the store in use ({entries})")
        ]
    return [
        finding(
            "registration_elsewhere",
            f"the {p.what} in {p.path} names the store {store_location_text(p.store)}, not the one in use "
            f"({store}): its sessions talk to another store",
            variant="unit" if p.path.suffix == ".env" else "register",
            store=store,
            path=p.path,
        )
        for p in wrong
    ]


def store_location_text(named: str | None) -> str:
    """What an entry names, for a message: its URL without the password, or the default store's path."""
    return str(default_db()) if named is None else redacted(named)
