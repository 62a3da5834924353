"""The typed model and its checks: operators (what every front end fills and every back end
reads), their argument types, the rule languages (simhpu's rules; op-plugin's output rules and their
C++), elementwise expressions, C++ formula expressions and the kernels' signatures they are checked
against."""
