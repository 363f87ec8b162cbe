"""The few MLflow REST calls the control plane makes as MLflow's admin to give each team its own login.

MLflow's basic-auth app (`mlflow server --app-name basic-auth`, MLflow 3.17) keeps users and their grants:
`users/create`, `users/update-password`, `users/list` (admins only: every user with its roles, each role
with its grants), and the per-user grants `users/permissions/grant` / `revoke`, which write the user's own
role (`__user_<id>__`); a grant on a resource is an upsert. Experiments and registered models are read
and created through the tracking REST API. Each call has the deployment's timeout and no retries: the
engine tries again on a later round. The admin's login is what MLflow's clients read
(MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD). mlflow is imported when a call is made.
"""

from __future__ import annotations

import json
from typing import Any

MANAGE = "MANAGE"
EXPERIMENT = "experiment"  # resource types of a grant (mlflow.server.auth.permissions)
REGISTERED_MODEL = "registered_model"


class MlflowRefused(RuntimeError):
    """MLflow answered with an error (other than the ones a caller expects)."""

    def __init__(self, endpoint: str, status: int, code: str, message: str) -> None:
        super().__init__(f"MLflow answered {status} {code} to {endpoint}: {message[:300]}")
        self.status, self.code = status, code


class MlflowAdmin:
    """REST calls to a tracking server, logged in as its admin."""

    def __init__(self, tracking_uri: str, timeout_s: float) -> None:
        self.tracking_uri, self.timeout_s = tracking_uri.rstrip("/"), timeout_s

    def call(
        self, method: str, endpoint: str, *, params: dict[str, str] | None = None, body: Any = None
    ) -> dict[str, Any]:
        """The answer's JSON; MlflowRefused for an error answer (a connection failure raises as it is)."""
        from mlflow.utils.credentials import get_default_host_creds
        from mlflow.utils.rest_utils import http_request

        kwargs: dict[str, Any] = {"params": params} if params is not None else {"json": body}
        creds = get_default_host_creds(self.tracking_uri)
        response = http_request(
            creds, endpoint, method, max_retries=0, timeout=self.timeout_s, raise_on_status=False, **kwargs
        )
        try:
            answer = json.loads(response.text) if response.text.strip() else {}
        except ValueError:
            answer = {"message": response.text}
        if response.status_code != 200:
            raise MlflowRefused(endpoint, response.status_code, str(answer.get("error_code", "")),
                                str(answer.get("message", "")))  # fmt: skip
        return answer if isinstance(answer, dict) else {}

    # --- users and grants ----------------------------------------------------------------------------

    def set_user(self, username: str, password: str) -> bool:
        """Creates the user, or sets its password when it exists; True when it was created."""
        try:
            self.call(
                "POST", "/api/2.0/mlflow/users/create", body={"username": username, "password": password}
            )
            return True
        except MlflowRefused as err:
            if err.code != "RESOURCE_ALREADY_EXISTS":
                raise
        body = {"username": username, "password": password}
        self.call("PATCH", "/api/2.0/mlflow/users/update-password", body=body)
        return False

    def users(self) -> list[dict[str, Any]]:
        """Every user with its roles and their grants (`roles[].permissions[]`: resource_type,
        resource_pattern, permission)."""
        return list(self.call("GET", "/api/2.0/mlflow/users/list").get("users", []))

    def grant(self, username: str, resource_type: str, resource_id: str, permission: str = MANAGE) -> None:
        body = {"username": username, "resource_type": resource_type, "resource_id": resource_id,
                "permission": permission}  # fmt: skip
        self.call("POST", "/api/3.0/mlflow/users/permissions/grant", body=body)

    def revoke(self, username: str, resource_type: str, resource_id: str) -> None:
        body = {"username": username, "resource_type": resource_type, "resource_id": resource_id}
        self.call("POST", "/api/3.0/mlflow/users/permissions/revoke", body=body)

    # --- experiments and registered models ------------------------------------------------------------

    def experiment_id(self, name: str) -> str:
        """The id of the experiment `name`, created when it is missing (the server picks its artifacts)."""
        try:
            found = self.call(
                "GET", "/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": name}
            )
            return str(found["experiment"]["experiment_id"])
        except MlflowRefused as err:
            if err.code != "RESOURCE_DOES_NOT_EXIST":
                raise
        try:
            return str(
                self.call("POST", "/api/2.0/mlflow/experiments/create", body={"name": name})["experiment_id"]
            )
        except MlflowRefused as err:  # created meanwhile (a job's driver, another replica)
            if err.code != "RESOURCE_ALREADY_EXISTS":
                raise
        found = self.call("GET", "/api/2.0/mlflow/experiments/get-by-name", params={"experiment_name": name})
        return str(found["experiment"]["experiment_id"])

    def ensure_registered_model(self, name: str, tags: dict[str, str], description: str) -> None:
        """The registered model `name` with `tags`: created when it is missing, tagged when it is not."""
        try:
            found = self.call("GET", "/api/2.0/mlflow/registered-models/get", params={"name": name})
        except MlflowRefused as err:
            if err.code != "RESOURCE_DOES_NOT_EXIST":
                raise
            found = None
        if found is None:
            body = {"name": name, "description": description,
                    "tags": [{"key": k, "value": v} for k, v in tags.items()]}  # fmt: skip
            try:
                self.call("POST", "/api/2.0/mlflow/registered-models/create", body=body)
                return
            except MlflowRefused as err:  # created meanwhile
                if err.code != "RESOURCE_ALREADY_EXISTS":
                    raise
            found = {}
        held = {t["key"]: t.get("value") for t in found.get("registered_model", {}).get("tags", [])}
        for key, value in tags.items():
            if held.get(key) != value:
                body = {"name": name, "key": key, "value": value}
                self.call("POST", "/api/2.0/mlflow/registered-models/set-tag", body=body)
