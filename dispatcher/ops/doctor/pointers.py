"""Doctor's checks that every registration, hook, status line and unit setting of ours names the
store in use (a registration made in another shell may name another store)."""

from dispatcher.core.findings import Finding, finding
from dispatcher.core.locations import default_db, redacted, shown
from dispatcher.ops import store_pointers as sp
from dispatcher.ops.doctor.check import CONFIG, check
from dispatcher.ops.doctor.context import Context


def _pointers(ctx: Context) -> list[sp.Pointer]:
    agents = sorted(ctx.config.agents) if ctx.config is not None else []
    return ctx.fact(
        "pointers",
        lambda: [p for path in sp.registration_files() for p in sp.file_pointers(path)] + sp.unit_pointers(agents),
    )


@check(CONFIG)
def registrations_ok(ctx: Context) -> list[Finding]:
    """Do all our entries (there being some) name the store in use?"""
    pointers = _pointers(ctx)
    if not pointers or not all(sp.points_at(p, ctx.locations.db) for p in pointers):
        return []
    entries = f"{len(pointers)} {'entry' if len(pointers) == 1 else 'entries'}"
    return [finding("registrations_ok", f"our registrations, hooks and status line name the store in use ({entries})")]


@check(CONFIG)
def registration_elsewhere(ctx: Context) -> list[Finding]:
    """Does an entry of ours name another store than the one in use?"""
    store = shown(ctx.locations.db)
    return [
        finding(
            "registration_elsewhere",
            f"the {p.what} in {p.path} names the store {store_location_text(p.store)}, not the one in use "
            f"({store}): its sessions talk to another store",
            variant="unit" if p.path.suffix == ".env" else "register",
            store=store,
            path=p.path,
        )
        for p in _pointers(ctx)
        if not sp.points_at(p, ctx.locations.db)
    ]


def store_location_text(named: str | None) -> str:
    """What an entry names, for a message: its URL without the password, or the default store's path."""
    return str(default_db()) if named is None else redacted(named)
