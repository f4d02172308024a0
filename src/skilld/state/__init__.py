"""`<state_dir>/state.db`: cursors, watermarks, provenance, kept proposals and the event log,
in one SQLite file (docs/design.md, "Files and tables").

`db` owns the connection, the schema and its migrations; each table family has a module of its
own, and `StateDB` is made of them: one connection, one transaction for a change and its event.
`lock` holds the daemon's lock on the state dir (imported from there: a command does without).
"""

from skilld.errors import StateError
from skilld.state.db import SCHEMA_VERSION, Database, utc_now_iso
from skilld.state.events import EVENT_KINDS, Event, EventLog
from skilld.state.proposals import KeptProposal, ProposalTable
from skilld.state.provenance import DISOWNED, Provenance, ProvenanceTable
from skilld.state.sessions import Held, SessionState, SessionTable
from skilld.state.skill_uses import SkillUseTable

__all__ = [
    "DISOWNED",
    "EVENT_KINDS",
    "SCHEMA_VERSION",
    "Event",
    "Held",
    "KeptProposal",
    "Provenance",
    "SessionState",
    "StateDB",
    "StateError",
    "lock",
    "utc_now_iso",
]


class StateDB(EventLog, ProvenanceTable, SessionTable, ProposalTable, SkillUseTable, Database):
    """state.db, with every table's reads and writes."""
