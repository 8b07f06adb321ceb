"""agentaddress-client: the Python client of agentaddress (docs/API.md §23).

from agentaddress_client import Client

client = Client()                      # AGENTADDRESS_URL, else http://127.0.0.1:8080
address = client.create_address(name="deploy watcher")
address.save("deploy-42")              # the CLI's credentials file
...
address = Client().load("deploy-42")   # a later run
for event in address.events():
    ...
    address.ack(event.id)
"""

from ._client import Address, AsyncAddress, AsyncClient, AsyncState, Client, State
from ._errors import (
    AddressGone,
    AgentAddressError,
    InvalidSignature,
    RateLimited,
    RevisionConflict,
    Unauthorized,
)
from ._models import (
    Acked,
    Answer,
    Delivery,
    Event,
    EventRef,
    Hook,
    Page,
    PersonRequest,
    StateKey,
    StateList,
    Timer,
)
from ._wake import verify_wake

__version__ = "0.1.0"

__all__ = [
    "Acked",
    "Address",
    "AddressGone",
    "AgentAddressError",
    "Answer",
    "AsyncAddress",
    "AsyncClient",
    "AsyncState",
    "Client",
    "Delivery",
    "Event",
    "EventRef",
    "Hook",
    "InvalidSignature",
    "Page",
    "PersonRequest",
    "RateLimited",
    "RevisionConflict",
    "State",
    "StateKey",
    "StateList",
    "Timer",
    "Unauthorized",
    "verify_wake",
]
