"""One generator per generated artifact. Each module's `render(env, views)`
returns {relative path: content} for its files; emit.render joins them."""
