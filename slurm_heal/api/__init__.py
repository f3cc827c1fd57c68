"""`slurm-heal serve`: the HTTP API and the web console (SPEC O5, Q1, P2, P4, I4).

A process of its own, beside the daemon. It never decides and never acts: it reads the
store and Slurm through the same code the admin CLI uses (`slurm_heal.operations`) and
writes a person's word (approve, deny, cancel, request, breaker reset, pause, unpause)
into the store's inbox exactly as the CLI does; the daemon consumes it at its next
cycle. So it can run, restart or die without touching the remediation loop.

    settings.py      the ``[api]`` section / serve's options; the bind rules
    auth.py          named bearer tokens from a file, a trusted proxy's user header; roles
    idempotency.py   a retried POST with the same Idempotency-Key never makes two commands
    views.py         what the endpoints and pages show (built on `operations`)
    app.py           the WSGI application: JSON endpoints, problem objects, console pages
    openapi.py       the OpenAPI document (served, and committed as docs/api-openapi.json)
    templates/       the console's Jinja2 pages (no JavaScript)
"""
