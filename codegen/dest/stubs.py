"""Stub entries: one translation unit each, with the stub's kernel, its
registration, and the PrivateUse1 registrations of the operator's group."""
from __future__ import annotations


def render(env, stubs) -> dict[str, str]:
    template = env.get_template("stub.cpp.j2")
    return {f"csrc/stubs/{s.cpp_name}.cpp": template.render(s=s) for s in stubs}
