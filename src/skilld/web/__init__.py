"""The panel, `skilld web`: a local web face over the reports and actions the CLI uses.

Starlette on uvicorn, Jinja2 templates, markdown-it-py for skill bodies, SVG charts drawn on
the server and one small script of our own. Only `skilld web` and a daemon with `[web] listen`
import this package: one-shot commands never load it.
"""

# What the rest of skilld may use: the submodules `skilld web` and the daemon start the panel
# from (named, not imported here, so that importing the package loads no web framework).
__all__ = ["login", "security", "serve"]
