"""The API's generated files: listed (all, or a thread's newest per format) and downloaded as
attachments, never rendered by the page."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from fastapi.responses import FileResponse

from tether.interfaces.web.context import MAX_INT, ThreadId, WebContext
from tether.interfaces.web.documents import ArtifactDoc, Artifacts, not_found
from tether.interfaces.web.threads import load_thread
from tether.store.artifact_files import file_of, sweep


def _artifact_doc(artifact: Any) -> ArtifactDoc:
    fields = {k: v for k, v in artifact.to_dict().items() if k in ArtifactDoc.model_fields}
    return ArtifactDoc(**fields, url=f"/api/artifacts/{artifact.artifact_id}/download")


MEDIA_TYPES = {
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "pdf": "application/pdf",
}


def router(ctx: WebContext) -> APIRouter:
    router = APIRouter()
    store = ctx.runtime.artifacts

    def current(**where: Any) -> Artifacts:
        sweep(ctx.runtime.home, store, ctx.runtime.jobs)  # superseded files go before the list is read
        return Artifacts(items=[_artifact_doc(a) for a in store.list(**where)])

    @router.get("/api/artifacts", response_model=Artifacts)
    def list_artifacts(limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> Artifacts:
        """The files generated in this home, newest first (a thread offers its newest per format)."""
        return current(limit=limit)

    @router.get("/api/threads/{thread_id}/artifacts", response_model=Artifacts)
    def thread_artifacts(thread_id: ThreadId) -> Artifacts:
        load_thread(ctx, thread_id)
        return current(thread_id=thread_id)

    @router.get("/api/artifacts/{artifact_id}/download", response_class=FileResponse)
    def download(artifact_id: Annotated[int, PathParam(ge=1, le=MAX_INT)]) -> FileResponse:
        """The file itself, as an attachment (never rendered by the page: an html file is a download)."""
        artifact = store.get(artifact_id)
        path = None if artifact is None or artifact.superseded_at else file_of(ctx.runtime.home, artifact)
        if artifact is None or path is None:
            raise not_found(f"no file {artifact_id} (it may have been replaced by a newer one)")
        return FileResponse(
            path,
            media_type=MEDIA_TYPES.get(artifact.format, "application/octet-stream"),
            filename=artifact.name,
            content_disposition_type="attachment",
            headers={"Cache-Control": "no-store"},
        )

    return router
