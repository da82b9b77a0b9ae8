"""The peer for the agent rows: LangGraph's prebuilt ReAct agent (with or without its SQLite
checkpointer), its ToolNode, a scripted chat model and a no-op tool. Installed only in the bench
environment, so its imports may be missing elsewhere: each builder returns None then."""
# pyright: reportMissingImports=false

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

Turn = Callable[[], object]


def langgraph_turn(checkpoints: Path | None) -> tuple[Turn, Callable[[], None]] | None:
    """One ReAct turn (a tool call, then an answer) per call, each on a new thread like tether's rows;
    with ``checkpoints``, persisted by ``SqliteSaver`` in that file. Returns the turn and its closer."""
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langgraph.prebuilt import create_react_agent
    except ImportError:
        return None

    class Scripted(BaseChatModel):
        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            self.calls += 1
            if self.calls % 2:
                message = AIMessage(
                    content="", tool_calls=[{"name": "b_inline", "args": {}, "id": f"c{self.calls}"}]
                )
            else:
                message = AIMessage(content="Done: the task completed and nothing else is needed.")
            return ChatResult(generations=[ChatGeneration(message=message)])

    conn = None
    saver = None
    if checkpoints is not None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(checkpoints, check_same_thread=False)
        saver = SqliteSaver(conn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(Scripted(), [_tool()], checkpointer=saver)
    threads = count()

    def turn() -> None:
        config: Any = {"configurable": {"thread_id": f"t{next(threads)}"}}
        # invoke, not ainvoke: SqliteSaver is synchronous only (its async twin needs aiosqlite)
        agent.invoke({"messages": [("user", "run the task")]}, config)

    def close() -> None:
        if conn is not None:
            conn.close()

    return turn, close


def toolnode_call() -> Turn | None:
    """One call of the no-op tool through LangGraph's ToolNode, in a one-node graph: a ToolNode outside a
    graph refuses to run (it wants the graph's runtime config), and inside one is how an agent calls it."""
    try:
        from langchain_core.messages import AIMessage
        from langgraph.graph import END, START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode
    except ImportError:
        return None
    graph = StateGraph(MessagesState)
    graph.add_node("tools", ToolNode([_tool()]))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    calls = count()

    def call() -> None:
        wanted = [{"name": "b_inline", "args": {}, "id": f"c{next(calls)}"}]
        out = app.invoke({"messages": [AIMessage(content="", tool_calls=wanted)]})
        assert out["messages"][-1].content == "ok", out

    return call


def _tool() -> Any:
    from langchain_core.tools import tool

    @tool
    def b_inline() -> str:
        """Run the task."""
        return "ok"

    return b_inline
