"""The peer for the loop-overhead benchmark: LangGraph's prebuilt ReAct agent, a scripted chat model
and a no-op tool. Installed only in the bench environment, so its imports may be missing elsewhere."""
# pyright: reportMissingImports=false

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any


def langgraph_loop(turns: int) -> float | None:
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool
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

    @tool
    def b_inline() -> str:
        """Run the task."""
        return "ok"

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(Scripted(), [b_inline])

    async def run() -> list[float]:
        samples = []
        for _ in range(turns):
            start = time.perf_counter()
            await agent.ainvoke({"messages": [("user", "run the task")]})
            samples.append(time.perf_counter() - start)
        return samples

    return statistics.median(asyncio.run(run()))
