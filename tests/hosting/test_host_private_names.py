"""The host packages' private names the package uses (all in ``_core_compat.py``) are still on the hosts' paths.

Each test fails when the host package stops using the name where the package relies on it: AG-UI derives a
thread's session id with ``_session_id_for_thread`` and reads its approval state from
``AgentFrameworkAgent._approval_state_store``; DevUI builds its executor in ``DevServer._ensure_executor``.
Over HTTP, ``test_two_workers.py`` (AG-UI approvals restored on another worker) and ``test_devui_store.py``
(DevUI's executor uses the bounded store) pin the same names.
"""

from __future__ import annotations

import inspect

import agent_framework_ag_ui
import agent_framework_ag_ui._agent_run as agui_run
import agent_framework_ag_ui._snapshots as agui_snapshots
from agent_framework import Content
from agent_framework_ag_ui import AgentFrameworkAgent
from agent_framework_devui import DevServer
from hosting_support import make_agent

from agent_framework_functional import _core_compat
from agent_framework_functional.hosting._agui_approvals import bound_approval_state
from agent_framework_functional.hosting._devui_store import BoundedConversationStore, BoundedDevServer


def _callers_of(name: str, module: object) -> list[str]:
    """The functions of ``module`` (AG-UI's run module) whose source calls ``name``."""
    found: list[str] = []
    for attribute, value in vars(module).items():
        if inspect.isfunction(value) and attribute != name and f"{name}(" in inspect.getsource(value):
            found.append(attribute)
    return found


def test_agui_derives_a_threads_session_id_as_we_do() -> None:
    assert _callers_of("_session_id_for_thread", agui_run), "AG-UI no longer derives session ids this way"
    ours = _core_compat.agui_session_id_for_thread(scope="tenant", thread_id="thread-1")
    assert ours == agui_snapshots._session_id_for_thread(scope="tenant", thread_id="thread-1")  # pyright: ignore[reportPrivateUsage]
    assert ours != _core_compat.agui_session_id_for_thread(scope="other", thread_id="thread-1")


def test_agui_reads_the_approval_state_we_install_and_registers_open_interrupts_once() -> None:
    agent = make_agent()
    runner = AgentFrameworkAgent(agent=agent)  # pyright: ignore[reportArgumentType]
    source = inspect.getsource(inspect.getmodule(AgentFrameworkAgent))  # pyright: ignore[reportArgumentType]
    assert "self._approval_state_store" in source  # AG-UI's runner reads the state from this attribute
    before = _core_compat.agui_approval_state(runner)
    bound_approval_state(runner, agent)
    state = _core_compat.agui_approval_state(runner)
    assert state is not before and type(state) is type(before)
    call = Content.from_function_call(call_id="call-1", name="request_info", arguments={"draft": "x"})
    for _ in range(2):  # the second is known already: not registered twice
        _core_compat.register_agui_hosted_approval(
            runner, scope="tenant", thread_id="thread-1", interrupt_id="interrupt-1", call=call
        )
    thread = agent_framework_ag_ui._approval_state.approval_state_thread_id(scope="tenant", thread_id="thread-1")  # pyright: ignore[reportPrivateUsage]
    assert state.lifecycle.occurrence_for_alias(thread_id=thread, interrupt_id="interrupt-1") is not None


async def test_devui_builds_its_executor_where_we_install_the_bounded_store() -> None:
    assert "_ensure_executor" in vars(DevServer)
    store = BoundedConversationStore(ttl=60.0)
    server = BoundedDevServer(conversation_store=store)
    server.register_entities([make_agent()])
    executor = await server._ensure_executor()  # pyright: ignore[reportPrivateUsage]
    assert executor.conversation_store is store  # DevUI built it here, and our installer ran
    assert store.approvals is not None
    assert _core_compat.devui_conversation_count(store) == 0
