"""The stages: env, net, bench and smoke, each a package of the same rooms (options, facts, gather, rules,
render, stage). The runner knows them only through runner.stage.Stage; preflight/ runs them in order.
"""
