"""Guards on what a jitted program reads from containers (issue 33): a value read from a dict, a
list or a tuple held in a global, a closure cell, a module or an object is part of the cache key.
Each row changes one such value between calls: the jitted call must compute what eager computes
with the new value (it traces again), and a call with nothing changed must hit the cache."""

import argparse
import copy
import os
import types
import warnings

import pytest
import torch

import thunder

CFG = {"scale": 2.0, "a": {"b": 3.0}, "flag": True}
SEQ = [1.5, 2.5]
TUP = (1.0, (2.0, 3.0))
OBJ = types.SimpleNamespace(sub=types.SimpleNamespace(lr=0.5), table={"w": 4.0})
SHIFTS = [0.5, 1.0]
OPTS = {"mode": "add"}
ARGS = argparse.Namespace(lr=0.1)


def _reset():
    CFG.clear()
    CFG.update({"scale": 2.0, "a": {"b": 3.0}, "flag": True})
    SEQ[:] = [1.5, 2.5]
    OBJ.sub.lr = 0.5
    OBJ.table = {"w": 4.0}
    SHIFTS[:] = [0.5, 1.0]
    OPTS.clear()
    OPTS["mode"] = "add"
    ARGS.lr = 0.1


def global_dict_item(x):
    return x * CFG["scale"]


def global_nested_dict_item(x):
    return x + CFG["a"]["b"]


def global_list_item(x):
    return x * SEQ[0] + SEQ[-1]


def global_list_length(x):
    return x * len(SEQ)


def global_list_iterated(x):
    for s in SHIFTS:
        x = x + s
    return x


def global_dict_key_tested(x):
    if "extra" in CFG:
        return x + CFG["extra"]
    return x - 1


def global_dict_get(x):
    return x * CFG.get("extra", 1.0)


def global_dict_items(x):
    out = x
    for k, v in OPTS.items():
        out = out + len(k) if v == "add" else out * len(k)
    return out


def global_branch_on_item(x):
    return x.relu() if CFG["flag"] else x.sigmoid()


def object_attribute_chain(x):
    return x * OBJ.sub.lr


def namespace_attribute(x):
    return x * ARGS.lr


def object_dict_attribute(x):
    return x + OBJ.table["w"]


def _closure_dict():
    cfg = {"scale": 2.0}

    def fn(x):
        return x * cfg["scale"]

    return fn, lambda: cfg.__setitem__("scale", 5.0)


def _closure_list():
    s = [1.0, 2.0]

    def fn(x):
        return x + s[0] * s[1]

    return fn, lambda: s.__setitem__(1, -3.0)


def _closure_list_appended():
    s = [1.0, 2.0]

    def fn(x):
        return x * len(s) + sum(s)

    return fn, lambda: s.append(4.0)


def _global(fn, change):
    return lambda: (fn, change)


CASES = [
    ("global_dict_item", _global(global_dict_item, lambda: CFG.__setitem__("scale", 7.0))),
    ("global_nested_dict_item", _global(global_nested_dict_item, lambda: CFG["a"].__setitem__("b", -1.0))),
    ("global_nested_dict_replaced", _global(global_nested_dict_item, lambda: CFG.__setitem__("a", {"b": 9.0}))),
    ("global_list_item", _global(global_list_item, lambda: SEQ.__setitem__(0, 4.0))),
    ("global_list_last_item_by_append", _global(global_list_item, lambda: SEQ.append(10.0))),
    ("global_list_length", _global(global_list_length, lambda: SEQ.append(3.0))),
    ("global_list_length_by_pop", _global(global_list_length, lambda: SEQ.pop())),
    ("global_list_iterated_item_changed", _global(global_list_iterated, lambda: SHIFTS.__setitem__(1, -2.0))),
    ("global_list_iterated_appended", _global(global_list_iterated, lambda: SHIFTS.append(3.0))),
    ("global_dict_key_added", _global(global_dict_key_tested, lambda: CFG.__setitem__("extra", 2.0))),
    ("global_dict_get_key_added", _global(global_dict_get, lambda: CFG.__setitem__("extra", 3.0))),
    ("global_dict_items_value_changed", _global(global_dict_items, lambda: OPTS.__setitem__("mode", "mul"))),
    ("global_dict_items_key_added", _global(global_dict_items, lambda: OPTS.__setitem__("extra_key", "add"))),
    ("global_branch_on_item", _global(global_branch_on_item, lambda: CFG.__setitem__("flag", False))),
    ("object_attribute_chain", _global(object_attribute_chain, lambda: setattr(OBJ.sub, "lr", 0.25))),
    ("namespace_attribute", _global(namespace_attribute, lambda: setattr(ARGS, "lr", 0.3))),
    ("object_dict_attribute", _global(object_dict_attribute, lambda: OBJ.table.__setitem__("w", -4.0))),
    ("closure_dict_item", _closure_dict),
    ("closure_list_item", _closure_list),
    ("closure_list_appended", _closure_list_appended),
]


@pytest.mark.parametrize("name,make", CASES, ids=[c[0] for c in CASES])
def test_a_changed_container_value_retraces_and_an_unchanged_one_hits(name, make):
    _reset()
    try:
        fn, change = make()
        x = torch.randn(3, 4)
        jfn = thunder.jit(fn)
        torch.testing.assert_close(jfn(x), fn(x))
        torch.testing.assert_close(jfn(x), fn(x))
        assert thunder.cache_misses(jfn) == 1 and thunder.cache_hits(jfn) == 1
        change()
        torch.testing.assert_close(jfn(x), fn(x))
        assert thunder.cache_misses(jfn) == 2
        torch.testing.assert_close(jfn(x), fn(x))
        assert thunder.cache_hits(jfn) == 2
    finally:
        _reset()


def test_a_removed_key_raises_as_eager():
    _reset()
    try:
        jfn = thunder.jit(global_dict_item)
        x = torch.randn(2)
        torch.testing.assert_close(jfn(x), global_dict_item(x))
        del CFG["scale"]
        with pytest.raises(KeyError, match="scale"):
            global_dict_item(x)
        with pytest.raises(KeyError, match="scale"):
            jfn(x)
    finally:
        _reset()


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.cfg = {"scale": 2.0, "shifts": [1.0]}

    def forward(self, x):
        return self.linear(x) * self.cfg["scale"] + self.cfg["shifts"][0]


@pytest.mark.parametrize("change", [
    lambda m: m.cfg.__setitem__("scale", -1.0),
    lambda m: m.cfg["shifts"].__setitem__(0, 5.0),
], ids=["module_dict_item", "module_nested_list_item"])
def test_a_module_config_dict_is_guarded(change):
    m = _Scaled()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(jm(x), m(x))
    torch.testing.assert_close(jm(x), m(x))
    assert thunder.cache_misses(jm) == 1
    change(m)
    torch.testing.assert_close(jm(x), m(x))
    assert thunder.cache_misses(jm) == 2


def test_a_tuple_in_a_global_is_keyed_by_value():
    global TUP

    def fn(x):
        return x * TUP[1][0]

    x = torch.randn(3)
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(x), fn(x))
    old = TUP
    try:
        TUP = (1.0, (-2.0, 3.0))
        torch.testing.assert_close(jfn(x), fn(x))
    finally:
        TUP = old


def test_a_function_made_by_exec_is_guarded():
    """Code run with exec in a namespace without __name__ (generated programs): its functions have
    no module, and are the user's."""
    ns = {}
    exec("CFG = {'shift': 1.0}\nSCALE = 2.0\ndef fn(x):\n    return x * SCALE + CFG['shift']\n", ns)
    fn, x = ns["fn"], torch.randn(3)
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(x), fn(x))
    ns["CFG"]["shift"] = 4.0
    torch.testing.assert_close(jfn(x), fn(x))
    ns["SCALE"] = -1.0
    torch.testing.assert_close(jfn(x), fn(x))


def test_each_block_of_a_model_has_its_config_guarded():
    """Blocks of one class share their forward's code: the second block's dict is guarded too."""
    m = torch.nn.Sequential(_Scaled(), _Scaled())
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    torch.testing.assert_close(jm(x), m(x))
    m[1].cfg["scale"] = 3.0
    torch.testing.assert_close(jm(x), m(x))
    assert thunder.cache_misses(jm) == 2


class _Indexed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3, 4))
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4)])

    def forward(self, x):
        return self.blocks[0](x) * self.weight[0]


def test_indexing_a_tensor_or_a_module_list_is_not_a_container_read():
    """self.weight[0] and self.blocks[0] make a new object per call: keyed, they would miss the
    cache on every call."""
    m = _Indexed()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    for _ in range(3):
        torch.testing.assert_close(jm(x), m(x))
    assert thunder.cache_misses(jm) == 1 and thunder.cache_hits(jm) == 2


# ---- tensors read from the attributes of objects passed as arguments ---------------------------


class _Box:
    def __init__(self):
        self.t = torch.ones(3)
        self.ts = [torch.ones(3), torch.zeros(3)]
        self.inner = types.SimpleNamespace(w=torch.full((3,), 2.0))


def _read_box(x, box):
    return x * box.t + box.ts[1] - box.inner.w


def _misses_after_change(fn, obj, change) -> int:
    """Calls jit(fn)(x, obj) twice (one trace), applies change(obj), calls again, each result
    checked against eager's; returns the traces made."""
    x = torch.randn(3)
    jf = thunder.jit(fn)
    torch.testing.assert_close(jf(x, obj), fn(x, obj))
    torch.testing.assert_close(jf(x, obj), fn(x, obj))
    assert thunder.cache_misses(jf) == 1
    change(obj)
    torch.testing.assert_close(jf(x, obj), fn(x, obj))
    return thunder.cache_misses(jf)


@pytest.mark.parametrize("change,retraces", [
    (lambda b: setattr(b, "t", torch.full((3,), 5.0)), False),   # another tensor in the attribute
    (lambda b: b.ts.__setitem__(1, torch.full((3,), 7.0)), False),  # another tensor in a list held
    (lambda b: setattr(b.inner, "w", torch.full((3,), -1.0)), False),  # in a nested object
    (lambda b: setattr(b, "t", torch.ones(1)), True),  # another shape: another trace
    (lambda b: setattr(b, "t", torch.ones(3, dtype=torch.float64)), True),  # another dtype
    (lambda b: b.t.add_(3.0), False),  # the same tensor updated in place: the same entry
    (lambda b: None, False),  # nothing changed: a hit
], ids=["attribute", "list_item", "nested_object", "shape", "dtype", "in_place", "unchanged"])
def test_tensors_read_from_argument_attributes_are_not_stale(change, retraces):
    # A tensor the program reads from an argument's attribute is an input of the trace, taken from
    # the attribute at each call: a call whose object holds another tensor there computes with it
    # (before the trace captured the first one, `box.t = new` then a call computed with the old
    # tensor: a silently stale result). Another tensor of the same kind needs no new trace.
    assert _misses_after_change(_read_box, _Box(), change) == (2 if retraces else 1)


def test_attribute_tensors_that_alias_are_keyed_as_aliases():
    # Two attributes holding one tensor are one input of the trace; a call where they hold two
    # tensors is another trace, not the first one reading one of them twice.
    def f(x, box):
        return x * box.t + box.ts[0]

    box = _Box()
    box.ts[0] = box.t
    x = torch.randn(3)
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(x, box), f(x, box))
    box.ts[0] = torch.full((3,), 4.0)
    torch.testing.assert_close(jf(x, box), f(x, box))
    assert thunder.cache_misses(jf) == 2


class _Settings:
    def __init__(self):
        self.scale, self.flag, self.mode, self.unused = 2.0, True, "add", 0


def _use_settings(x, s):
    y = x * s.scale
    if s.flag:
        y = y + 1
    return y + x if s.mode == "add" else y - x


@pytest.mark.parametrize("make", [_Settings, lambda: types.SimpleNamespace(scale=2.0, flag=True, mode="add", unused=0)],
                         ids=["object", "namespace"])
@pytest.mark.parametrize("change,retraces", [
    (lambda s: setattr(s, "scale", 3.0), True),
    (lambda s: setattr(s, "flag", False), True),
    (lambda s: setattr(s, "mode", "sub"), True),
    (lambda s: setattr(s, "unused", 7), None),  # never read: an object's does not retrace
    (lambda s: None, False),
], ids=["float", "bool", "str", "unread", "unchanged"])
def test_scalars_read_from_argument_attributes_are_not_stale(make, change, retraces):
    # A scalar the program reads from an argument's attribute is a constant of the trace; a call
    # whose object holds another value there traces again (before: computed with the old value).
    s = make()
    misses = _misses_after_change(_use_settings, s, change)
    if retraces is None:  # a namespace has all its scalars guarded (its type takes no read hook)
        retraces = isinstance(s, types.SimpleNamespace)
    assert misses == (2 if retraces else 1)
    assert "__getattribute__" not in vars(_Settings)  # the read hook is gone after the trace


class _WarnsOnConfigNames(torch.nn.Module):
    """diffusers' models: a config value read as a module attribute works, with a FutureWarning."""

    def __init__(self):
        super().__init__()
        self._config = {"patch_size": 2}

    def __getattr__(self, name):
        if name in self.__dict__.get("_config", {}):
            warnings.warn(f"{name} read as an attribute", FutureWarning)
            return self._config[name]
        return super().__getattr__(name)

    def forward(self, x, patches: bool = False):
        if patches:  # the branch eager does not take: no warning
            return x * self.patch_size
        return x + 1


def test_reading_the_program_for_guards_warns_of_nothing_eager_does_not():
    model, x = _WarnsOnConfigNames(), torch.randn(3)
    with warnings.catch_warnings(record=True) as eager:
        warnings.simplefilter("always")
        expected = model(x)
    with warnings.catch_warnings(record=True) as jitted:
        warnings.simplefilter("always")
        got = thunder.jit(model)(x)
    assert [str(w.message) for w in eager] == [] and [str(w.message) for w in jitted] == []
    torch.testing.assert_close(got, expected)


_GLOBAL_NET = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))


def _call_global_net(x):
    return _GLOBAL_NET(x)


@pytest.mark.parametrize("how", ["closure", "global", "bound forward"])
def test_a_module_the_function_reaches_is_guarded_like_a_jitted_module(how):
    # model.eval() (and a changed scalar attribute) between calls of a function that calls the
    # model: a new trace, as thunder.jit(model) gets, not the training trace's dropout.
    net = _GLOBAL_NET if how == "global" else torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    net.train()
    fn = {"closure": lambda x: net(x), "global": _call_global_net, "bound forward": net.forward}[how]
    jfn = thunder.jit(fn)
    x = torch.ones(3, 4)
    jfn(x)
    net.eval()
    torch.testing.assert_close(jfn(x), net(x))
    net[1].p = 0.0
    net.train()
    torch.testing.assert_close(jfn(x), net(x))  # p = 0: training with no dropout
    net[1].p = 0.5


@pytest.mark.parametrize("how", ["module", "closure"])
def test_a_model_changed_after_jit_is_traced_again(how):
    # A head replaced, a module appended, a parameter registered under a new name after the
    # first call: the next call computes what eager computes (it ran the old model's trace).
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    jnet = thunder.jit(net) if how == "module" else thunder.jit(lambda x: net(x))
    x = torch.randn(3, 4)
    torch.testing.assert_close(jnet(x), net(x))
    net[2] = torch.nn.Linear(4, 2)  # same shapes: the old trace would run silently
    torch.testing.assert_close(jnet(x), net(x))
    net.append(torch.nn.Tanh())
    torch.testing.assert_close(jnet(x), net(x))
    net[0].bias = torch.nn.Parameter(torch.ones(4))  # a new tensor in the slot
    torch.testing.assert_close(jnet(x), net(x))
    misses = thunder.cache_misses(jnet)
    jnet(x)
    assert thunder.cache_misses(jnet) == misses  # nothing changed: the cache hits


_CALLS = 0


def test_programs_changing_python_state_they_read_trace_every_call():
    # `self.pos += 1` (a decoding position), a global or nonlocal counter, an argument's attribute:
    # tracing made the change once and a cached call did not make it again (the entry was keyed
    # by the state after the trace). Such calls now trace each time, with a warning.
    class Cache(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k", torch.zeros(4))
            self.pos = 0

        def forward(self, x):
            self.k[self.pos] = x
            self.pos += 1
            return self.k * 1

    eager, jitted = Cache(), Cache()
    jm = thunder.jit(jitted)
    with pytest.warns(UserWarning, match="changes Python state that it reads"):
        for i in range(3):
            torch.testing.assert_close(jm(torch.tensor(i + 1.0)), eager(torch.tensor(i + 1.0)))
    assert jitted.pos == eager.pos == 3

    def counted(x):
        global _CALLS
        _CALLS += 1
        return x * _CALLS

    jf = thunder.jit(counted)
    got = [jf(torch.ones(1)).item() for _ in range(3)]
    assert got == [1.0, 2.0, 3.0] and _CALLS == 3

    n = 0

    def closure(x):
        nonlocal n
        n += 1
        return x * n

    jc = thunder.jit(closure)
    assert [jc(torch.ones(1)).item() for _ in range(3)] == [1.0, 2.0, 3.0]

    class Box:
        k = 0

    box = Box()

    def attribute(x, b):
        b.k += 1
        return x * b.k

    ja = thunder.jit(attribute)
    assert [ja(torch.ones(1), box).item() for _ in range(3)] == [1.0, 2.0, 3.0] and box.k == 3


def test_programs_reading_state_they_leave_alone_trace_once():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 2.0

        def forward(self, x):
            return x * self.scale

    m = Scaled()
    jm = thunder.jit(m)
    for _ in range(3):
        jm(torch.ones(2))
    assert thunder.cache_misses(jm) == 1
    m.scale = 3.0
    torch.testing.assert_close(jm(torch.ones(2)), torch.full((2,), 3.0))
    jm(torch.ones(2))
    assert thunder.cache_misses(jm) == 2


@pytest.mark.parametrize("change", ["del_list_item", "list_insert", "list_pop", "del_dict_item", "dict_pop",
                                    "del_attribute", "del_parameter"])
def test_submodules_taken_away_trace_again(change):
    # Before, the next call ran the old model's trace, the removed layer included.
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(3, 3) for _ in range(2)])
            self.d = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 3), "b": torch.nn.Linear(3, 3)})
            self.head = torch.nn.Linear(3, 3)
            self.scale = torch.nn.Parameter(torch.tensor(2.0))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            for layer in self.d.values():
                x = layer(x)
            x = self.head(x) if hasattr(self, "head") else x
            return x * self.scale if hasattr(self, "scale") else x

    torch.manual_seed(0)
    m = M().double()
    jm = thunder.jit(m)
    x = torch.randn(4, 3, dtype=torch.float64)
    torch.testing.assert_close(jm(x), m(x))
    {
        "del_list_item": lambda: m.layers.__delitem__(0),
        "list_insert": lambda: m.layers.insert(0, torch.nn.Linear(3, 3).double()),
        "list_pop": lambda: m.layers.pop(1),
        "del_dict_item": lambda: m.d.__delitem__("a"),
        "dict_pop": lambda: m.d.pop("b"),
        "del_attribute": lambda: delattr(m, "head"),
        "del_parameter": lambda: delattr(m, "scale"),
    }[change]()
    torch.testing.assert_close(jm(x), m(x))
    assert thunder.cache_misses(jm) == 2


class _Cfg:
    k = 2.0


_CFG = _Cfg()


def test_class_level_scalars_the_program_reads_are_guarded():
    # `class M: scale = 2.0` read as self.scale, and a config object's class default: changing
    # either after jitting reused the old trace
    class M(torch.nn.Module):
        scale = 2.0

        def forward(self, x):
            return x * self.scale

    m, x = M(), torch.ones(2)
    jm = thunder.jit(m)
    jm(x)
    M.scale = 5.0
    torch.testing.assert_close(jm(x), m(x))

    jf = thunder.jit(lambda x: x * _CFG.k)
    jf(x)
    _CFG.k = 4.0  # on the instance, shadowing the class's
    torch.testing.assert_close(jf(x), x * 4.0)
    del _CFG.k
    _Cfg.k = 3.0
    torch.testing.assert_close(jf(x), x * 3.0)


# Functions, defaults and the environment the program reads (session 45: each was baked into the
# trace, and a change after jitting silently ran the old program).
def _scaled(x, scale=2.0):
    return x * scale


def _calls_a_helper_with_a_default(x):
    return _scaled(x)


def _deep5(x):
    return x * CFG["scale"]


def _deep4(x):
    return _deep5(x)


def _deep3(x):
    return _deep4(x)


def _deep2(x):
    return _deep3(x)


def _deep1(x):
    return _deep2(x)


def _reads_six_calls_deep(x):
    return _deep1(x)


def _reads_the_environment(x):
    if os.environ.get("THUNDER_TEST_GUARD_FLAG") == "1":
        return x * 2
    if os.getenv("THUNDER_TEST_GUARD_OTHER"):
        return x * 3
    return x - 1 if "THUNDER_TEST_GUARD_SET" in os.environ else x


class _Activated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.act = torch.relu

    def helper(self, x):
        return x + 1

    def forward(self, x):
        return self.act(self.helper(self.lin(x)))


def _patch_class_method():
    saved = _Activated.helper
    _Activated.helper = lambda self, x: x - 5
    return lambda: setattr(_Activated, "helper", saved)


def _patch_forward_of_a_library_module(m):
    m.lin.forward = lambda x: x * 3
    return lambda: None


def _set_environment(name, value):
    os.environ[name] = value
    return lambda: os.environ.pop(name, None)


FUNCTION_CASES = [
    # (name, make the function or module, change it: returns an undo)
    ("helper_default_changed", lambda: _calls_a_helper_with_a_default,
     lambda f: (setattr(_scaled, "__defaults__", (5.0,)), lambda: setattr(_scaled, "__defaults__", (2.0,)))[1]),
    ("own_default_changed", lambda: _scaled,
     lambda f: (setattr(_scaled, "__defaults__", (-1.0,)), lambda: setattr(_scaled, "__defaults__", (2.0,)))[1]),
    ("read_six_calls_deep", lambda: _reads_six_calls_deep,
     lambda f: (CFG.__setitem__("scale", 9.0), _reset)[1]),
    ("environ_get", lambda: _reads_the_environment, lambda f: _set_environment("THUNDER_TEST_GUARD_FLAG", "1")),
    ("os_getenv", lambda: _reads_the_environment, lambda f: _set_environment("THUNDER_TEST_GUARD_OTHER", "x")),
    ("environ_contains", lambda: _reads_the_environment, lambda f: _set_environment("THUNDER_TEST_GUARD_SET", "")),
    ("class_method_replaced", _Activated, lambda m: _patch_class_method()),
    ("instance_method_set", _Activated,
     lambda m: (setattr(m, "helper", types.MethodType(lambda self, x: x * 10, m)), lambda: None)[1]),
    ("function_attribute_replaced", _Activated, lambda m: (setattr(m, "act", torch.sigmoid), lambda: None)[1]),
    ("library_module_forward_replaced", _Activated, _patch_forward_of_a_library_module),
    ("object_function_attribute_replaced", lambda: _uses_a_config_function,
     lambda f: (setattr(FN_CFG, "act", torch.tanh), lambda: setattr(FN_CFG, "act", torch.relu))[1]),
]

FN_CFG = types.SimpleNamespace(act=torch.relu)


def _uses_a_config_function(x):
    return FN_CFG.act(x - 0.5)


@pytest.mark.parametrize("name,make,change", FUNCTION_CASES, ids=[c[0] for c in FUNCTION_CASES])
def test_functions_defaults_and_the_environment_the_program_reads_are_guarded(name, make, change):
    _reset()
    fn = make()
    x = torch.randn(3, 4)
    jfn = thunder.jit(fn)
    with torch.no_grad():
        torch.testing.assert_close(jfn(x), fn(x))
        torch.testing.assert_close(jfn(x), fn(x))
        assert thunder.cache_misses(jfn) == 1 and thunder.cache_hits(jfn) == 1
        undo = change(fn)
        try:
            expected = fn(x)
            torch.testing.assert_close(jfn(x), expected)
            assert thunder.cache_misses(jfn) == 2
            torch.testing.assert_close(jfn(x), expected)
            assert thunder.cache_hits(jfn) == 2
        finally:
            undo()
            _reset()


def test_draws_from_python_and_numpy_random_generators_run_each_call():
    # `if random.random() < p` (a layer-drop) and NumPy draws: the trace held the first call's draw
    # and every later call repeated it. Such calls trace each time, as state-changing ones do.
    import random

    import numpy as np

    def layer_drop(x):
        return x * 0 if random.random() < 0.5 else x + 1

    def numpy_scaled(x):
        return x * float(np.random.rand())

    x = torch.randn(4)
    for fn, seed in ((layer_drop, random.seed), (numpy_scaled, np.random.seed)):
        jfn = thunder.jit(fn)
        seed(0)
        expected = [fn(x) for _ in range(12)]
        seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [jfn(x) for _ in range(12)]
        for e, g in zip(expected, got):
            torch.testing.assert_close(g, e)
    # A program that draws nothing is cached as before.
    jf = thunder.jit(lambda x: x * 2)
    jf(x), jf(x)
    assert thunder.cache_hits(jf) == 1


def test_a_module_plain_tensor_attribute_replaced_after_jitting_is_read():
    # `self.table = torch.zeros(4)` (neither parameter nor buffer), replaced by a tensor of the same
    # kind: the trace kept the one it captured. It is read at each call now, without a new trace.
    class A(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.table = torch.zeros(4)

        def forward(self, x):
            return self.lin(x) + self.table

    m = A()
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(jm(x), m(x))
        m.table = torch.arange(4.0)
        torch.testing.assert_close(jm(x), m(x))
        assert thunder.cache_misses(jm) == 1
        m.table = torch.arange(8.0).reshape(2, 4)  # another shape: traced again
        torch.testing.assert_close(jm(x), m(x))
        assert thunder.cache_misses(jm) == 2


def _optimizer_steps(make, steps=5, set_to_none=True, scheduler=False, eager_first=False):
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    m2 = copy.deepcopy(m1)
    o1, o2 = make(m1.parameters()), make(m2.parameters())
    if scheduler:
        s1, s2 = (torch.optim.lr_scheduler.StepLR(o, 1, gamma=0.5) for o in (o1, o2))
    step = thunder.jit(o2.step)
    for i in range(steps):
        x = torch.randn(5, 4)
        m1(x).pow(2).sum().backward()
        m2(x).pow(2).sum().backward()
        o1.step()
        if eager_first and i == 0:
            o2.step()
        else:
            step()
        o1.zero_grad(set_to_none=set_to_none)
        o2.zero_grad(set_to_none=set_to_none)
        if scheduler:
            s1.step()
            s2.step()
        for a, b in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(b, a)
    return step


@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("scheduler", [False, True])
def test_a_jitted_optimizer_step_reads_the_current_gradients_and_hyperparameters(set_to_none, scheduler):
    # thunder.jit(optimizer.step): the gradients `zero_grad(set_to_none=True)` and backward replace
    # were read as the first call's tensors, and an LR scheduler's new lr as the first lr.
    step = _optimizer_steps(lambda p: torch.optim.SGD(p, lr=0.1, foreach=False), set_to_none=set_to_none,
                            scheduler=scheduler)
    assert thunder.cache_misses(step) == (5 if scheduler else 1)


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
                                  lambda p: torch.optim.Adam(p, lr=0.1, foreach=False),
                                  lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
                                  lambda p: torch.optim.AdamW(p, lr=0.1, foreach=True)],
                         ids=["sgd_momentum", "adam", "sgd_momentum_foreach", "adamw_foreach"])
def test_a_jitted_optimizer_step_that_creates_its_state_is_refused_and_runs_after_an_eager_step(make):
    # The first step creates the momentum buffers (Adam's moments); traced, they were proxies left
    # in optimizer.state, and later calls kept the first step's branch (no momentum), silently.
    m = torch.nn.Linear(4, 2)
    opt = make(m.parameters())
    m(torch.randn(3, 4)).sum().backward()
    with pytest.raises(NotImplementedError, match=r"step creates its state on this call .*optimizer\.step\(\)"):
        thunder.jit(opt.step)()
    assert len(opt.state) == 0  # put back as it was
    opt.step()  # eager's first step works on the state the refusal left
    _optimizer_steps(make, eager_first=True)


INDEX_LIST = [0, 1]
INDEX_ARRAY = None


def _indexed_by_a_global_list(x):
    return x[INDEX_LIST] * 2


def _indexed_by_a_global_array(x):
    return x[INDEX_ARRAY] * 2


@pytest.mark.parametrize("which", ["list", "numpy"])
def test_a_list_or_array_the_program_indexes_with_is_guarded_by_its_contents(which):
    # x[IDX] with IDX a global list (or NumPy array) changed in place: the trace held the old
    # positions.
    import numpy as np

    global INDEX_ARRAY
    INDEX_LIST[:] = [0, 1]
    INDEX_ARRAY = np.array([0, 1])
    fn = _indexed_by_a_global_list if which == "list" else _indexed_by_a_global_array
    x = torch.arange(12.0).view(4, 3)
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(x), fn(x))
    torch.testing.assert_close(jfn(x), fn(x))
    assert thunder.cache_misses(jfn) == 1
    if which == "list":
        INDEX_LIST[0] = 3
    else:
        INDEX_ARRAY[0] = 3
    torch.testing.assert_close(jfn(x), fn(x))
    assert thunder.cache_misses(jfn) == 2
