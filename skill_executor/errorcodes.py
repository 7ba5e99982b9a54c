"""The error catalogue: every code the service can answer with, in one place.

Each entry gives the HTTP status, how the error reaches an MCP client, what it means and
what the caller should do.  :class:`skill_executor.errors.ExecutorError` takes its status from
here when a raise names a catalogued code, the docs' error reference is generated from
this table, and ``tests/unit/test_error_catalogue.py`` checks that every code raised in
``skill_executor/`` is listed and every listed code is raised somewhere.

This module is a data table, and long on purpose (over the 450 lines a module of code is
held to): one entry per code, read top to bottom, and one place to look a code up.  Split by
area, a code's neighbours and the generated reference would be spread over several files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: How an error reaches an MCP client (see :data:`MCP_MAPPINGS`).
McpMapping = Literal["tool", "http", "none"]

MCP_MAPPINGS: dict[str, str] = {
    "tool": 'tools/call: a result with isError true and the text "error (<code>): <message>"; '
    "other requests (resources/read, skills/*, tasks/*): JSON-RPC error -32602 (Invalid params), "
    'or -32603 (Internal error) for a 5xx, message "<code>: <message>"',
    "http": "on /mcp: the same HTTP status and JSON error body, before any JSON-RPC message",
    "none": "not reachable over MCP (CLI, library, pytest plugin, image build or start-up)",
}


@dataclass(frozen=True, slots=True)
class ErrorCode:
    code: str
    status: int
    meaning: str
    action: str
    mcp: McpMapping = "tool"


def _catalogue(*entries: ErrorCode) -> dict[str, ErrorCode]:
    table: dict[str, ErrorCode] = {}
    for entry in entries:
        if entry.code in table:
            raise ValueError(f"error code {entry.code!r} is catalogued twice")
        table[entry.code] = entry
    return table


E = ErrorCode

CATALOGUE: dict[str, ErrorCode] = _catalogue(
    # -- generic: a class's default code, and HTTP statuses the framework answers ------------
    E(
        "error",
        400,
        "A refusal without a more specific code (a stored run error without one).",
        "Read the message; report it if it names no cause.",
    ),
    E("bad_request", 400, "The request is refused as malformed.", "Fix the request as the message says."),
    E("not_found", 404, "The resource does not exist (or is not yours).", "Check the name or id."),
    E("forbidden", 403, "The request is not allowed.", "Do not retry; use a permitted request."),
    E("conflict", 409, "The request conflicts with the resource's current state.", "Re-read the state, then retry."),
    E(
        "too_large",
        413,
        "A request body or stored object is larger than the configured limit.",
        "Send less, or raise the limit (SKILL_EXECUTOR_MAX_REQUEST_BYTES).",
        "http",
    ),
    E(
        "busy",
        429,
        "Every run slot and queue place is taken (a Retry-After header is sent).",
        "Retry after the Retry-After delay, with backoff.",
    ),
    E("unavailable", 503, "A dependency of the service is not available.", "Retry later; operators: check the logs."),
    E(
        "unauthorized",
        401,
        "No API key, or an unknown one (a WWW-Authenticate: Bearer header is sent).",
        "Send Authorization: Bearer <key> with a configured key.",
        "http",
    ),
    E(
        "method_not_allowed",
        405,
        "The path does not take this HTTP method.",
        "Use the method the API reference lists.",
        "http",
    ),
    E("not_acceptable", 406, "No representation matches the Accept header.", "Accept application/json.", "http"),
    E(
        "unsupported_media_type",
        415,
        "The request body's Content-Type is not taken here.",
        "Send the Content-Type the API reference lists.",
        "http",
    ),
    E(
        "misdirected_request",
        421,
        "The request was sent to a server that will not answer it.",
        "Send it to the service's own host and port.",
        "http",
    ),
    E(
        "invalid_request",
        422,
        "The request body or parameters fail validation; details list each field.",
        "Fix the fields named in details.",
        "http",
    ),
    E("malformed_json", 400, "The request body is not valid JSON.", "Send a valid JSON body.", "http"),
    E(
        "invalid_http",
        400,
        "The request is not valid HTTP/1.1 or exceeds the parser's limits.",
        "Send a well-formed request with shorter headers and target.",
        "http",
    ),
    E(
        "internal",
        500,
        "An unexpected failure inside the service; the message names the request id.",
        "Report it with the request id; operators: the log has the trace.",
    ),
    # -- the HTTP boundary: hosts, origins, keys -------------------------------------------
    E(
        "loopback_only",
        403,
        "Without API keys only connections to a loopback address are served.",
        "Connect over loopback, or configure API keys.",
        "http",
    ),
    E(
        "host_not_allowed",
        421,
        "The Host header names neither a loopback name nor the bound address.",
        "Address the service by the host it is bound to.",
        "http",
    ),
    E(
        "cross_origin_refused",
        403,
        "A browser request from an origin that is not allowed.",
        "List the origin in SKILL_EXECUTOR_ALLOWED_ORIGINS.",
        "http",
    ),
    E(
        "role_needs_postgres",
        400,
        "serve --role api and worker need a shared Postgres database, not the embedded SQLite.",
        "Set SKILL_EXECUTOR_DATABASE_URL=postgresql://..., or run `skill-executor serve` (role all).",
        "none",
    ),
    E(
        "role_needs_shared_store",
        400,
        "A cluster role (serve --role api, worker) started on the default object store (no other process sees it).",
        "Operators: set SKILL_EXECUTOR_OBJECT_STORE to the cluster's s3://bucket[/prefix] or a shared folder.",
        mcp="none",
    ),
    E(
        "unsafe_bind",
        400,
        "serve refuses to bind a non-loopback address without API keys.",
        "Configure API keys, or bind 127.0.0.1.",
        "none",
    ),
    E(
        "ambiguous_authorization",
        400,
        "The request has more than one Authorization header.",
        "Send exactly one Authorization header.",
        "http",
    ),
    E("admin_required", 403, "The action needs an admin key.", "Use an admin key (SKILL_EXECUTOR_ADMIN_KEYS)."),
    E("invalid_owner", 400, "The owner (tenant) id in the request is not a valid id.", "Send a valid owner id."),
    E("owner_not_found", 404, "No such owner (tenant).", "Check the owner id."),
    E(
        "client_disconnected",
        400,
        "The client went away before the whole request body arrived.",
        "Retry the upload.",
        "http",
    ),
    E(
        "shutting_down",
        503,
        "The service is shutting down; the request or the run was not completed.",
        "Retry against a running instance.",
    ),
    # -- MCP over HTTP ------------------------------------------------------------------------
    E(
        "session_not_found",
        404,
        "No open MCP session with this id for this key.",
        "Start a new session (initialize) without the Mcp-Session-Id header.",
        "http",
    ),
    E(
        "ambiguous_session_id",
        400,
        "The request has more than one Mcp-Session-Id header.",
        "Send exactly one Mcp-Session-Id header.",
        "http",
    ),
    E(
        "invalid_session_id",
        400,
        "The Mcp-Session-Id header is not a well-formed session id.",
        "Send the id the server returned at initialize.",
        "http",
    ),
    E(
        "mcp_session_limit",
        429,
        "This key holds as many open MCP sessions as allowed.",
        "Close idle sessions (DELETE /mcp) or wait for them to expire.",
        "http",
    ),
    # -- tools (REST /v1/tools and MCP tools/call) ------------------------------------------
    E(
        "invalid_arguments",
        400,
        "A tool's arguments are missing, mistyped or contradictory.",
        "Fix the arguments as the message says.",
    ),
    E("invalid_format", 400, "Unknown tool or context format.", "Use one of the formats the message lists."),
    E("tool_not_found", 404, "No tool of that name.", "List the tools and use one of them."),
    E(
        "tool_unavailable",
        400,
        "The tool exists but is not offered by this entry point.",
        "Call it where it is offered (for example skill_run through the service).",
    ),
    E(
        "tool_call_id_missing",
        400,
        "A tool-result message in this format must answer a call id.",
        "Give the id of the call being answered.",
    ),
    E(
        "session_mismatch",
        403,
        "The call is bound to one session and its arguments name another.",
        "Omit the session argument, or name the bound session.",
    ),
    E(
        "artifact_too_large",
        400,
        "The artifact is larger than an MCP message may carry.",
        "Download it over HTTP (GET /v1/artifacts/...).",
    ),
    E("resource_not_found", 404, "An unknown skill:// resource URI.", "List the resources and read one of them."),
    # -- skills -------------------------------------------------------------------------------
    E(
        "skill_not_found",
        404,
        "No skill of that name (or not visible to this key).",
        "List the skills; check the name.",
    ),
    E(
        "file_not_found",
        404,
        'The skill has no such file (a "did you mean" is suggested); or no file of this key has that '
        "id (POST /v1/files; another key's id is not found either).",
        "Use a path from the skill's file listing, or an id this key uploaded or saved.",
    ),
    E(
        "doc_not_found",
        404,
        'The skill has no such doc (a "did you mean" is suggested).',
        "Use a path from the skill's doc listing.",
    ),
    E(
        "invalid_skill",
        400,
        "The skill breaks the Agent Skills spec; details list the problems.",
        "Fix SKILL.md as the problems say.",
    ),
    E("skill_exists", 409, "A skill of that name is already installed.", "Upload a new version, or delete it first."),
    E(
        "read_only_skill",
        403,
        "The skill is shipped in a read-only skills root; only installed skills change.",
        "Change it where it is shipped, or install a copy under another name.",
    ),
    E(
        "shadows_read_only_skill",
        409,
        "An install would shadow a skill shipped in a read-only root.",
        "Pick another name.",
    ),
    E(
        "install_disabled",
        403,
        "No install root is configured: skills cannot be installed or deleted.",
        "Set SKILL_EXECUTOR_INSTALL_DIR (or a writable data dir).",
    ),
    E(
        "install_failed",
        503,
        "The install folder could not be written or cleaned.",
        "Operators: check the install folder's permissions and space.",
    ),
    E(
        "install_root_overlaps",
        500,
        "The install root overlaps a read-only skills root, or holds the data folder, the registry or the workspaces.",
        "Operators: give SKILL_EXECUTOR_INSTALL_DIR a folder of its own (default <DATA_DIR>/skills).",
        "none",
    ),
    E(
        "skills_root_overlaps",
        500,
        "A read-only skills root overlaps the data folder, the registry or the "
        "workspaces: what tenants write there would be discovered as skills.",
        "Operators: keep SKILL_EXECUTOR_SKILLS_DIRS apart from SKILL_EXECUTOR_DATA_DIR and WORKSPACE_ROOT.",
        "none",
    ),
    E(
        "atomic_replace_unsupported",
        503,
        "The file system cannot swap an installed skill atomically.",
        "Operators: put the install root on a file system with renameat2 RENAME_EXCHANGE.",
    ),
    E(
        "skill_dependencies_unmet",
        422,
        "The skill's declared dependencies cannot be installed; details list them.",
        "Fix the skill's requirements, or provide a wheelhouse or package index.",
    ),
    E(
        "host_tools_unusable",
        503,
        "The service cannot run pip or npm the isolated way (as HOST_TOOLS_USER, with its interpreter).",
        "Operators: follow the message (HOST_TOOLS_PYTHON, HOST_TOOLS_USER, readable folders), "
        "or set SKILL_EXECUTOR_SKILL_DEPS=off.",
    ),
    E(
        "host_tool_output_refused",
        503,
        "What pip or npm wrote cannot be taken over safely (e.g. a file with several hard links).",
        "Operators: check the package sources; the skill's resolution is not installed.",
    ),
    # -- the registry: uploads and versions ------------------------------------------------
    E(
        "registry_disabled",
        503,
        "This service keeps no skill versions (no registry).",
        "Use a service with a data dir (the registry).",
    ),
    E(
        "invalid_package",
        400,
        "The upload is not a usable skill package (empty, no file part, a bad entry).",
        "Send a .zip or .tar.gz, or files[] parts with relative paths.",
    ),
    E("package_too_large", 413, "The package unpacks to more bytes or files than allowed.", "Send a smaller skill."),
    E(
        "upload_too_large",
        413,
        "The upload is larger than SKILL_EXECUTOR_SKILL_UPLOAD_MAX_BYTES.",
        "Send a smaller upload.",
    ),
    E(
        "upload_too_many_files",
        413,
        "The upload holds more files than SKILL_EXECUTOR_SKILL_UPLOAD_MAX_FILES.",
        "Send fewer files.",
    ),
    E("name_mismatch", 400, "A new version's SKILL.md names another skill.", "Keep the skill's name in new versions."),
    E("reserved_name", 400, "The skill name holds a word the hosted platforms reserve.", "Pick another name."),
    E(
        "invalid_bundle",
        400,
        "A run's bundle.data is not base64.",
        "Send the archive's bytes base64-encoded (standard alphabet, padded).",
    ),
    E(
        "bundle_not_found",
        404,
        "No bundle with that digest was sent by this key (or it has been removed).",
        "Send the bundle's data again.",
    ),
    E(
        "invalid_skill_name",
        400,
        "The skill name is not 1-128 ASCII letters, digits, '.', '_' or '-' (starting with a letter or digit).",
        "Name the skill by its id (or its name, if it is written that way).",
    ),
    E(
        "invalid_version",
        400,
        "The version reference is not 1-999999999, latest, default or sha256:<64 hex "
        "digits>, or a version was given where only a skill is meant.",
        "Use name@<n>, name@latest or name@sha256:<hex>; name the skill alone for /versions, PATCH, DELETE, audit.",
    ),
    E(
        "skill_no_default",
        409,
        "The skill has versions but no default: it was published with no_default and nobody set one, so "
        "it is in no overview and an unpinned name does not resolve.",
        "Name a version (name@N, name@latest), or set the default (PATCH /v1/skills/{name}, skills pin).",
    ),
    E("version_not_found", 404, "The skill has no such version (or it was deleted).", "List the skill's versions."),
    E(
        "version_is_default",
        409,
        "The version is the skill's default and cannot be deleted.",
        "Set another default first.",
    ),
    E(
        "version_in_use",
        409,
        "A run uses this version, or a download of it is being sent.",
        "Retry once the run or the download has finished.",
    ),
    # -- runs: the request and its limits -------------------------------------------------
    E("invalid_command", 400, "The command is empty or contains a NUL byte.", "Send a valid command."),
    E(
        "command_too_large",
        413,
        "The command is longer than SKILL_EXECUTOR_MAX_COMMAND_BYTES.",
        "Pass large data through stdin or inputs.",
    ),
    E("stdin_too_large", 413, "stdin is larger than SKILL_EXECUTOR_MAX_STDIN_BYTES.", "Pass large data as an input."),
    E(
        "timeout_too_large",
        400,
        "The requested timeout exceeds SKILL_EXECUTOR_MAX_TIMEOUT.",
        "Ask for at most the server maximum.",
    ),
    E(
        "invalid_env",
        400,
        "An environment variable name or value is invalid, or there are too many.",
        "Send valid names and at most SKILL_EXECUTOR_MAX_ENV_VARS variables.",
    ),
    E("env_refused", 400, "The environment variable is reserved by the sandbox.", "Do not set it."),
    E(
        "env_too_large",
        413,
        "The environment is larger than SKILL_EXECUTOR_MAX_ENV_BYTES.",
        "Send a smaller environment.",
    ),
    E(
        "invalid_cwd",
        400,
        "The working folder is not a folder of the skill or workspace.",
        "Use an existing relative folder.",
    ),
    E("invalid_text", 400, "A text field contains a NUL byte or is not valid UTF-8.", "Send clean text."),
    E("output_caps", 400, "The requested output caps exceed the server maximum.", "Ask for at most the maximum."),
    E("invalid_glob", 400, "An output glob is not a workspace-relative pattern.", "Use a relative glob without '..'."),
    E(
        "invalid_name_template",
        400,
        "The outputs' name_template is invalid.",
        "Use the placeholders the message lists.",
    ),
    E(
        "idempotency_key_reused",
        409,
        "The Idempotency-Key was used for a different request; details give the run id.",
        "Use a fresh key for a different request.",
    ),
    E(
        "idempotent_replay",
        409,
        "A concurrent retry with the same Idempotency-Key (internal: answered with the original run).",
        "Nothing: the original run is returned.",
        "none",
    ),
    E("store_busy", 503, "The embedded database stayed locked by another process.", "Retry after Retry-After seconds."),
    E(
        "session_snapshot_failed",
        503,
        "A session's work/ could not be restored from, or kept in, the object store.",
        "Retry later; operators: check the object store (a failed keep is a warning in the run's result).",
    ),
    E(
        "database_unavailable",
        503,
        "The database (SKILL_EXECUTOR_DATABASE_URL) cannot be reached.",
        "Retry after Retry-After seconds; operators: check the database (the service reconnects by itself).",
    ),
    E(
        "mcp_unavailable",
        501,
        "The MCP server is not installed here: the mcp extra (mcp>=2.3,<3) is missing, or another package "
        "pinned mcp 1.x.",
        "Install skill-executor[mcp] (in an environment of its own when a framework needs mcp 1.x); the REST "
        "API works without it.",
        mcp="http",
    ),
    E(
        "extra_missing",
        501,
        "A configured part needs an extra that is not installed: cluster (a Postgres database), s3 (an S3 "
        "object store) or kubernetes (the agent-sandbox runtime).",
        "Install the extra the message names (pip install 'skill-executor[cluster]', ...), or configure "
        "without that part.",
        mcp="none",
    ),
    E(
        "invalid_egress_grant",
        500,
        "The egress gateway cannot apply a run's grant as the policy made it (an allow-list entry or an "
        "injection it cannot read): a disagreement between the policy's checks and the gateway's, never the "
        "caller's fault.",
        "Report it with the rule's egress block; operators: simplify the rule's egress block meanwhile.",
    ),
    E(
        "invalid_settings",
        400,
        "A SKILL_EXECUTOR_* variable does not parse (the message names it and says what it takes).",
        "Fix the variable; the settings reference lists each one's type and default.",
        mcp="none",
    ),
    E(
        "invalid_database_url",
        400,
        "SKILL_EXECUTOR_DATABASE_URL is not a sqlite:/// or postgresql:// URL.",
        "Operators: fix the setting.",
        mcp="none",
    ),
    E(
        "database_schema",
        503,
        "The database's schema is not the one this version of the service uses.",
        "Operators: run `skill-executor db upgrade` (or upgrade the service that is newer).",
        mcp="none",
    ),
    E("run_not_found", 404, "No run with this id (or not yours).", "Check the run id."),
    E(
        "invalid_cursor",
        400,
        "A listing's cursor is not one the service gave.",
        "Pass the previous page's next_cursor as it is, or start again without a cursor.",
        mcp="none",
    ),
    E("run_finished", 409, "The run has already ended.", "Read its result instead."),
    # -- the command policy (SKILL_EXECUTOR_POLICY_FILE; skill_executor/policy/) ---------------
    E(
        "command_denied",
        403,
        "The command policy refuses the command before anything starts; details name the rule, the program "
        "and the reason (a program denied or not allowed, or one that cannot be known before the run).",
        "Do not retry the same command; use a program the rule allows, or ask an operator to change the policy.",
    ),
    E(
        "policy_unenforceable",
        403,
        "A command-policy rule with allow or deny applies to the run, and the service's runtime cannot enforce it "
        "inside the sandbox at exec (the local and agent-sandbox runtimes): the run is refused, never run unenforced.",
        "Run it on a service with the docker or bwrap runtime, or ask an operator to change the policy.",
    ),
    E(
        "network_not_allowed",
        422,
        "The request's network.allow names a host its policy rule's egress does not allow (a run may ask for "
        "less than its rule allows, never more), or the request has network where no rule with egress applies; "
        "details name the rule and the host.",
        "Ask only for hosts the rule allows, or leave network out; ask an operator to change the policy.",
    ),
    E(
        "egress_unavailable",
        503,
        "A policy rule with egress applies to the run, and this service cannot give it the network the rule "
        "grants: it runs no egress gateway, or its gateway (skill_executor/egress) could not start (mitmproxy "
        "missing for SKILL_EXECUTOR_EGRESS_PYTHON?), ended or did not answer. The run is refused, never run "
        "without the network nor with it unaudited; details name the rule when one is known.",
        "Retry later; operators: read the service log for the gateway's error and check the egress environment "
        "(SKILL_EXECUTOR_EGRESS_PYTHON), or remove the rule's egress block.",
    ),
    E(
        "invalid_secrets_file",
        500,
        "The secrets file (SKILL_EXECUTOR_SECRETS_FILE) cannot be read or is invalid (a reference to a variable "
        "that is not set, a file that cannot be read, a value too short): the service does not start. The "
        "message names the secret, never its value.",
        "Fix the file as the message says.",
        mcp="none",
    ),
    E(
        "invalid_keys_file",
        500,
        "A line of the API keys file names its key badly (name= not a-z 0-9 . _ -, or used twice): "
        "the service does not start.",
        "Fix the file as the message says.",
        mcp="none",
    ),
    E(
        "invalid_policy_file",
        500,
        "The policy file cannot be read or is invalid (bad YAML, an unknown field): the service does not start.",
        "Fix the file as the message says.",
        mcp="none",
    ),
    E(
        "approval_rejected",
        403,
        "The run waited for approval (pending_approval) and was rejected; nothing ran.",
        "Do not retry the same command without asking whoever rejected it (details.reason).",
    ),
    E(
        "approval_expired",
        408,
        "The run waited for approval longer than SKILL_EXECUTOR_APPROVAL_TIMEOUT_SECONDS; nothing ran.",
        "Submit it again and have it approved in time.",
    ),
    E(
        "approval_not_pending",
        409,
        "The run (or the egress host: GET /v1/egress/approvals) is not waiting for approval (it was decided "
        "already, expired, or never needed approval).",
        "Read the run's status.",
    ),
    E(
        "too_many_pending_approvals",
        429,
        "The key has as many runs waiting for approval as it may (SKILL_EXECUTOR_MAX_PENDING_APPROVALS).",
        "Have one decided, cancel one, or wait for one to expire; then retry.",
    ),
    E(
        "approval_forbidden",
        403,
        "The policy rule holding the run (or the egress host) lets only an admin key decide (approver: admin).",
        "Ask an admin to approve or reject the run.",
    ),
    E(
        "run_not_active",
        409,
        "The run is not running in this process (another instance has it).",
        "Ask the instance that runs it, or wait for its result.",
    ),
    E(
        "interrupted",
        500,
        "The service restarted, or (in a cluster) the worker running it was lost, while the run was in progress "
        "(a run's stored error; it was not re-executed).",
        "Submit the run again if it is safe to repeat.",
    ),
    E(
        "no_workers",
        503,
        "In a cluster: no run worker holds a live lease, so nothing could run the request (it was not queued).",
        "Retry after Retry-After; an operator starts or repairs the workers (`skill-executor cluster status`).",
    ),
    E(
        "queue_timeout",
        503,
        "In a cluster: no worker took the run within SKILL_EXECUTOR_QUEUE_TIMEOUT_SECONDS (a run's stored error; "
        "it never started).",
        "Submit it again later; an operator adds workers (the queue depth is in /metrics).",
    ),
    # -- inputs, workspaces, sessions ---------------------------------------------------------
    E("too_many_inputs", 400, "More inputs than SKILL_EXECUTOR_MAX_INPUTS.", "Send fewer inputs (archive them)."),
    E("inputs_too_large", 413, "Staging the inputs would exceed SKILL_EXECUTOR_MAX_STAGED_BYTES.", "Send less."),
    E("inputs_too_deep", 400, "Staging would nest folders deeper than allowed.", "Flatten the input."),
    E("invalid_input", 400, "An input source is neither a regular file nor a folder.", "Use a file or a folder."),
    E("invalid_input_scheme", 400, "An input reference uses an unknown scheme.", "Use one of the schemes listed."),
    E("input_not_found", 404, "An input source does not exist.", "Check the reference."),
    E(
        "host_input_refused",
        403,
        "Host-path inputs are disabled or outside SKILL_EXECUTOR_ALLOWED_HOST_ROOTS.",
        "Upload the data, or have an operator allow the root.",
    ),
    E(
        "target_conflict",
        409,
        "The target already exists, or lies inside the folder being copied.",
        "Pick another target.",
    ),
    E(
        "invalid_path",
        400,
        "A path is empty, absolute, too long, or contains '..' or a NUL byte.",
        "Send a clean relative path.",
    ),
    E(
        "path_escape",
        403,
        "A path resolves outside its root (through a link, for example).",
        "Use a path inside the root.",
    ),
    E("reserved_path", 400, "The path is reserved by the service in the workspace.", "Use another path."),
    E("invalid_session", 400, "The session id is not a valid id.", "Use letters, digits, '.', '_' and '-'."),
    E(
        "session_lost",
        409,
        "In a cluster: the worker holding this session's workspace was lost, with the session's files.",
        "Start a new session (and stage its inputs again).",
    ),
    E("session_busy", 409, "A run in this session is already in progress.", "Wait for it, or use another session."),
    E(
        "session_network_conflict",
        409,
        "The session's network cannot be opened: it has network already (a session has one grant, opened once), "
        "or its interactive processes started without network (their sandbox has no path to the egress gateway).",
        "Narrow the session's network (PATCH), or end its processes (or the session) first.",
    ),
    E(
        "session_network_not_found",
        404,
        "The session has no network: it was never opened with network, or it ended.",
        "Open it (PUT /v1/sessions/{session}/network with a skill whose policy rule has egress).",
    ),
    # -- a session's interactive processes (/v1/sessions/{session}/processes) ----------------
    E(
        "process_not_found",
        404,
        "No process with this id in this session (or not yours; an ended process is forgotten after a while).",
        "Check the session and the process id; list the session's processes.",
    ),
    E(
        "process_ended",
        409,
        "The process has ended: it takes no input and no signals.",
        "Poll its output and exit code; start a new process.",
    ),
    E(
        "process_stdin_closed",
        409,
        "The process's stdin was closed (a write with eof: true).",
        "Start a new process to give it input again.",
    ),
    E(
        "process_stdin_full",
        409,
        "The process did not read its stdin: a write waited 10 s and gave up (the error says how many bytes it wrote).",
        "Poll the process's output (it may wait for you to read), write less at a time, or kill it.",
    ),
    E(
        "process_limit",
        429,
        "This session runs as many processes as allowed (SKILL_EXECUTOR_PROCESSES_PER_SESSION); or its sandbox "
        "is at the end of its lifetime (4 × SKILL_EXECUTOR_PROCESS_MAX_SECONDS since its first process); or as "
        "many sessions as allowed have processes (SKILL_EXECUTOR_PROCESS_SANDBOXES_PER_KEY for the key, "
        "SKILL_EXECUTOR_PROCESS_SANDBOXES for the service).",
        "Kill a process of the session, or wait for one to end (once its last has ended, its sandbox starts anew).",
    ),
    E(
        "process_lost",
        410,
        "In a cluster: the worker that ran the process is gone; the process ended with it and its output is lost "
        "(the process is listed with reason 'lost').",
        "Start the process again (the session moves to another worker with its work/ as its last run left it).",
    ),
    E(
        "worker_unreachable",
        503,
        "In a cluster: the worker running the session's processes does not answer (it may be restarting, or lost: "
        "once its lease has run out, its processes are reported lost).",
        "Retry after Retry-After seconds.",
    ),
    E(
        "session_elsewhere",
        409,
        "In a cluster: another worker took the session while a process was being started on this one (a race "
        "the API replica retries by itself).",
        "Retry the start.",
    ),
    E(
        "process_wait_limit",
        429,
        "As many polls with a wait (and output streams) as allowed wait at once: 8 of one key, 24 of the "
        "service (each holds one of the service's worker threads).",
        "Poll without wait, or close an output stream; then try again.",
    ),
    E(
        "egress_unsupported",
        501,
        "The run has an egress grant and the service's runtime cannot give its sandbox the path to the egress "
        "gateway: the local and agent-sandbox runtimes; bwrap without its launcher (no C compiler); Docker on "
        "gVisor whose runsc may not open host sockets; a gateway socket or CA certificate that cannot be "
        "mounted safely (a socket folder holding more than the socket, a certificate with a private key).",
        "Run the service with the docker or bwrap runtime; on gVisor register runsc with --host-uds=all; "
        "give the gateway's socket a folder of its own.",
    ),
    E(
        "processes_unsupported",
        501,
        "The runtime in use has no interactive processes (only the docker runtime, with runc or gVisor, has).",
        "Run the service with SKILL_EXECUTOR_RUNTIME=docker, or use runs.",
    ),
    E(
        "session_limit",
        429,
        "This tenant keeps as many sessions as allowed (SKILL_EXECUTOR_SESSIONS_PER_TENANT).",
        "Reuse a session, or wait for idle sessions to expire (SKILL_EXECUTOR_SESSION_TTL_SECONDS).",
    ),
    E(
        "disk_full",
        413,
        "Staged inputs do not fit the session's disk cap (or the run's); or, on agent-sandbox, the session's "
        "work/ a run left in its pod could not be brought back whole (past the cap): the session keeps what it "
        "had before the run.",
        "Stage less, or clear the session's work/.",
    ),
    E(
        "skill_too_large",
        413,
        "The skill's files do not fit the run's volume (the disk cap).",
        "Operators: raise SKILL_EXECUTOR_DOCKER_DISK_BYTES; authors: make the skill smaller.",
    ),
    E(
        "session_disk_cap_mismatch",
        409,
        "The session was made under the other disk cap (hard or soft).",
        "Use a new session id, or the DISK_CAP the session was made with.",
    ),
    E(
        "disk_cap_unavailable",
        503,
        "The hard disk cap cannot be set up (root, loop devices, ext4, mkfs).",
        "Operators: run as root with loop devices and e2fsprogs, or choose SKILL_EXECUTOR_DISK_CAP=soft.",
    ),
    E("workspace_error", 500, "An unexpected file-system error in the workspace.", "Retry; operators: check the disk."),
    # -- artifacts ----------------------------------------------------------------------------
    E(
        "invalid_artifact_name",
        400,
        "The artifact name has characters or parts that are not allowed.",
        "Use letters, digits, '.', '_', '+', '-' in '/'-separated parts.",
    ),
    E("invalid_artifact_ref", 400, "The artifact reference or its version is invalid.", "Use artifact://name[@n]."),
    E("artifact_not_found", 404, "No such artifact or version (or not yours).", "List the artifacts."),
    E("invalid_mime_type", 400, "The Content-Type is not type/subtype.", "Send a valid media type."),
    E(
        "invalid_upload",
        400,
        "A file upload without exactly one file part, or a raw body without ?name=.",
        "Send one multipart file part, or the raw body with ?name=<file name>.",
    ),
    # -- agent context --------------------------------------------------------------------------
    E("invalid_budget", 400, "The budget has unknown fields or values out of range.", "Send valid budget fields."),
    E("invalid_policy", 400, "Unknown eviction policy.", "Use none, lru or mention."),
    E("invalid_mode", 400, "Unknown doc selection mode.", "Use add, replace or clear."),
    E("invalid_counter", 400, "Unknown token counter.", "Use estimate or tiktoken-cl100k."),
    E(
        "counter_unavailable",
        400,
        "The exact token counter needs packages that are not installed.",
        "Install skill-executor[tokens], or use the estimate counter.",
    ),
    E(
        "budget_exceeded",
        409,
        "Loading this would exceed the context budget; details say what to evict.",
        "Evict something, or raise the budget.",
    ),
    E("not_loaded", 404, "The skill is not loaded in this session's context.", "Load the skill first."),
    E("unknown_doc", 404, "The skill has no such doc.", "Use a doc path the skill lists."),
    E("context_changed", 409, "The skill was loaded again while its docs were being selected.", "Select again."),
    # -- the agent-sandbox runtime (Kubernetes: runtimes/agentsandbox) -----------------------------
    E(
        "runtime_unavailable",
        503,
        "No sandbox pod could be claimed for the run (a Retry-After header is sent); details.reason says why: "
        "claim_timeout (the warm pool stayed empty for SKILL_EXECUTOR_AGENT_SANDBOX_CLAIM_TIMEOUT_SECONDS), "
        "no_pool (no pool for the tier), pool_missing, template_missing, claim_failed, api_unauthorized, "
        "api_forbidden, api_error, api_unreachable, pod_unreachable.",
        "Retry after Retry-After; operators: check the warm pools and the worker's RBAC (details.reason).",
    ),
    E(
        "queue_full",
        429,
        "Every place to wait for a sandbox pod is taken (SKILL_EXECUTOR_AGENT_SANDBOX_CLAIM_WAITERS_MAX; "
        "a Retry-After header is sent).",
        "Retry after Retry-After, with backoff; operators: grow the warm pools.",
    ),
    E(
        "unsupported_on_runtime",
        400,
        "The run asks for what this worker's runtime does not offer; details name the runtime and the "
        "feature: on agent-sandbox, skills with dependency environments (they are on the worker's disk).",
        "Run it without the feature, or on workers with SKILL_EXECUTOR_RUNTIME=docker.",
    ),
    E(
        "sandbox_lost",
        500,
        "The run's sandbox pod went away while the command ran (evicted, its server killed): the output "
        "stream broke before the exit (a run's stored error; what streamed until then is kept).",
        "Submit the run again if it is safe to repeat.",
    ),
    # -- the Docker runtime and the runner image ------------------------------------------------
    E("engine_unavailable", 503, "The Docker engine is not reachable.", "Operators: start dockerd or set DOCKER_HOST."),
    E(
        "engine_error",
        503,
        "The Docker engine failed to create, start, attach to or remove a container.",
        "Retry; operators: check the engine's logs.",
    ),
    E(
        "image_missing",
        503,
        "The runner image (or the image of the Python tier the skill needs) is not on the engine.",
        "Operators: run 'skill-executor image build' (a tier: the --flavour the message names).",
    ),
    E(
        "python_tier_unavailable",
        503,
        "The skill needs a Python tier (its requires-python) this runtime cannot give it.",
        "Operators: offer the tier (SKILL_EXECUTOR_PYTHON_TIER_IMAGES; agent-sandbox: a python<tier> pool) "
        "or run the skill on the docker runtime.",
    ),
    E(
        "oci_runtime_missing",
        503,
        "The configured OCI runtime is not registered with the engine.",
        "Operators: register it, or unset SKILL_EXECUTOR_DOCKER_OCI_RUNTIME.",
    ),
    E(
        "oci_runtime_misconfigured",
        503,
        "gVisor is registered without the runtime arguments the sandbox needs.",
        "Operators: add the arguments the message lists to the runtime's runtimeArgs.",
    ),
    E(
        "image_build_failed",
        400,
        "Building the runner image failed.",
        "Read the message; fix the host tool it names.",
        "none",
    ),
    E(
        "image_context_missing",
        400,
        "The runner image's build context is missing.",
        "Build from a source checkout.",
        "none",
    ),
    E(
        "image_pins_invalid",
        400,
        "The runner image's requirement files disagree.",
        "Pin the packages identically.",
        "none",
    ),
    E(
        "image_versions_failed",
        400,
        "The versions installed in the runner image could not be listed.",
        "Check the image exists and runs.",
        "none",
    ),
    # -- the object store (SKILL_EXECUTOR_OBJECT_STORE) --------------------------------------------
    E(
        "object_store_unavailable",
        503,
        "The object store cannot be reached or answered with a server error (a Retry-After header is sent).",
        "Retry after the Retry-After delay; operators: check the store (S3 endpoint or folder).",
    ),
    E(
        "object_store_misconfigured",
        503,
        "The object store refused access or its bucket does not exist (the message names bucket and endpoint).",
        "Operators: check SKILL_EXECUTOR_OBJECT_STORE, the endpoint and the AWS credentials.",
    ),
    E("object_not_found", 404, "No object with this key in the object store.", "Check the key; do not retry."),
    E(
        "object_corrupt",
        500,
        "The object store returned bytes whose SHA-256 is not the one asked for.",
        "Operators: check the store; the object was altered or damaged.",
    ),
    E(
        "tree_manifest_invalid",
        500,
        "A stored tree (a dependency environment) in the object store is not one the service wrote "
        "(a path or link leaving it, an entry below a link, another key's): nothing of it was restored.",
        "Operators: check the store; the environment's pointer or manifest was altered.",
    ),
    E(
        "tree_unstorable",
        500,
        "A dependency environment holds what the object store cannot keep (a FIFO, a socket, a device).",
        "Report it: a resolved environment holds only folders, files and links.",
    ),
    E(
        "version_manifest_invalid",
        500,
        "A skill version's row names files that cannot be a version (a path leaving its folder, a digest "
        "that is not its manifest's): nothing of it was built.",
        "Operators: check the database's skill_versions rows.",
    ),
    # -- service processes ------------------------------------------------------------------------
    E("data_dir_in_use", 409, "Another service uses this data dir.", "Stop it, or use another data dir.", "none"),
    E(
        "instance_in_use",
        409,
        "The instance id is held by a live process.",
        "Use another SKILL_EXECUTOR_INSTANCE_ID.",
        "none",
    ),
    # -- untrusted patterns (skill tests' matches, output globs) ----------------------------------
    E("invalid_pattern", 400, "The regular expression does not parse (RE2 syntax).", "Fix the pattern."),
    E(
        "pattern_unsupported",
        400,
        "The pattern uses what RE2 cannot run (lookarounds, backreferences).",
        "Rewrite it without them.",
    ),
    E("pattern_too_large", 400, "The pattern's repetitions or compiled size exceed RE2's limits.", "Simplify it."),
    E("pattern_too_long", 400, "The pattern is longer than allowed.", "Shorten it."),
    # -- skill tests and the CLI ---------------------------------------------------------------------
    E("usage", 400, "The command line is invalid.", "See --help.", "none"),
    E(
        "invalid_test_file",
        400,
        "A skill test file cannot be used; the message names the line.",
        "Fix the test file.",
        "none",
    ),
    E("skill_invalid", 400, "The skill under test does not load.", "Fix the skill (see its validate case).", "none"),
    E(
        "skill_name_taken",
        400,
        "Two skill folders under test have the same name.",
        "Test them in separate runs.",
        "none",
    ),
    E(
        "infrastructure_unavailable",
        503,
        "Tests could not run: the engine, image or service is not there.",
        "Start the engine or the service; nothing about the skill is known.",
        "none",
    ),
    E(
        "server_unreachable",
        503,
        "The service the tests run against cannot be reached.",
        "Check --server and the key.",
        "none",
    ),
    E(
        "publish_not_allowed",
        409,
        "Testing a skill folder on a service would upload it, and this run may not.",
        "Pass --publish existing (or new), or test locally.",
        "none",
    ),
    E(
        "skill_not_on_server",
        409,
        "--publish existing, and the service has no such skill with a default.",
        "Upload the skill first, or pass --publish new.",
        "none",
    ),
    E(
        "default_moved",
        409,
        "The skill's default version moved while this run uploaded a version.",
        "Re-run the tests.",
        "none",
    ),
)
