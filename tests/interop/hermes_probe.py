"""Run by Hermes Agent's own interpreter (its venv from tests/interop/install), never by
skilld's: asks Hermes's skill tools what they see in `$HERMES_HOME` and prints it as JSON.

usage: hermes_probe.py NAME  ->  {"list": skills_list(), "view": skill_view(NAME),
                                  "index": the system prompt's skill index}
"""

import json
import sys

from agent.prompt_builder import build_skills_system_prompt
from tools.skills_tool import skill_view, skills_list

name = sys.argv[1]
print(
    json.dumps(
        {
            "list": json.loads(skills_list()),
            "view": json.loads(skill_view(name)),
            "index": build_skills_system_prompt(),
        }
    )
)
