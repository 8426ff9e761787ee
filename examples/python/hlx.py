"""A ctypes binding over libhlx.so (include/hlx/hlx.h), Python standard library only.

    import hlx
    with hlx.Model("path/to/checkpoint", context_capacity=256) as m:
        for event in m.stream("Hello", max_new_tokens=16):
            print(event.text, end="", flush=True)

The library is found from `library=`, else $HLX_LIBRARY, else the loader's search path
(libhlx.so.<ABI_VERSION>, as installed by `cmake --install` / `make install`).

Threads: as in the C API, a Model is driven (step, stream, result) by the thread that loaded it;
submit, cancel and poll may come from any thread. Errors raise hlx.Error carrying the C status and
the library's message.
"""
import ctypes
import os
from ctypes import (POINTER, CFUNCTYPE, Structure, byref, c_char_p, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint8, c_uint64, c_void_p)
from typing import Iterator, List, NamedTuple, Optional, Sequence, Union

ABI_VERSION = 1  # HLX_ABI_VERSION of the hlx.h these declarations mirror

# hlx_status_t
OK, INVALID_ARGUMENT, CAPACITY_EXCEEDED, NOT_FOUND, UNAVAILABLE = 0, 1, 7, 8, 11
# hlx_event_kind_t / hlx_finish_t
EVENT_TOKEN, EVENT_FINISHED = 0, 1
FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_CANCELLED, FINISH_ERROR = 0, 1, 2, 3, 4
FINISH_NAMES = {0: "none", 1: "stop", 2: "length", 3: "cancelled", 4: "error"}
CONTEXT_CAPACITY_DEFAULT = -1


class _ModelOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("context_capacity", c_int64), ("slots", c_int64),
                ("threads", c_int32), ("kv_dtype", c_int32), ("load_tokenizer", c_int32),
                ("skip_special_tokens", c_int32),
                # struct version 2
                ("prefix_cache", c_int32), ("image_cache_mib", c_int32)]


class _ModelInfo(Structure):
    _fields_ = [("context_capacity", c_int64), ("slots", c_int64), ("vocab_size", c_int64),
                ("has_tokenizer", c_int32)]


class _Event(Structure):
    _fields_ = [("id", c_uint64), ("kind", c_int32), ("finish", c_int32), ("token", c_int64),
                ("text", c_void_p), ("text_len", c_size_t), ("error_status", c_int32),
                ("error_message", c_char_p)]


_Callback = CFUNCTYPE(None, c_void_p, POINTER(_Event))


class _GenerationParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("max_new_tokens", c_int64), ("temperature", c_float),
                ("top_k", c_int64), ("top_p", c_float), ("min_p", c_float),
                ("repetition_penalty", c_float), ("presence_penalty", c_float),
                ("frequency_penalty", c_float), ("seed", c_uint64), ("stop", POINTER(c_char_p)),
                ("stop_count", c_size_t), ("stop_at_eos", c_int32), ("on_event", _Callback),
                ("user_data", c_void_p),
                # struct version 2
                ("logit_bias_ids", POINTER(c_int64)), ("logit_bias_values", POINTER(c_float)),
                ("logit_bias_count", c_size_t)]


class _Result(Structure):
    _fields_ = [("id", c_uint64), ("finish", c_int32), ("error_status", c_int32),
                ("error_message", c_char_p), ("prompt_tokens", c_int64), ("tokens", POINTER(c_int64)),
                ("token_count", c_size_t), ("text", c_void_p), ("text_len", c_size_t)]


class _Admission(Structure):
    _fields_ = [("prompt_tokens", c_int64), ("max_new_tokens", c_int64), ("context_capacity", c_int64)]


class Error(Exception):
    """A non-OK hlx_status_t: .status (int), .name ("invalid_argument", ...), .message."""

    def __init__(self, status: int, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.status, self.name, self.message = status, name, message


class Event(NamedTuple):
    id: int
    kind: int      # EVENT_TOKEN or EVENT_FINISHED
    token: int     # -1 on EVENT_FINISHED
    text: str      # text this event decided (may be empty)
    finish: int    # FINISH_* on EVENT_FINISHED, else FINISH_NONE


class Result(NamedTuple):
    id: int
    finish: int
    tokens: List[int]
    text: str
    prompt_tokens: int
    cached_tokens: int = 0  # leading prompt tokens reused from the prefix cache (not prefilled)
    cached_images: int = 0  # images whose features came from the image-feature cache


_S = c_int  # hlx_status_t is an enum: an int in the C ABI
_SIGNATURES = {
    "hlx_version": (c_char_p, []),
    "hlx_abi_version": (c_int, []),
    "hlx_status_name": (c_char_p, [c_int]),
    "hlx_last_error_message": (c_char_p, []),
    "hlx_last_admission": (_S, [POINTER(_Admission)]),
    "hlx_model_options_init_sized": (_S, [POINTER(_ModelOptions), c_size_t]),
    "hlx_model_load": (_S, [c_char_p, POINTER(_ModelOptions), POINTER(c_void_p)]),
    "hlx_model_retain": (None, [c_void_p]),
    "hlx_model_release": (None, [c_void_p]),
    "hlx_model_info": (_S, [c_void_p, POINTER(_ModelInfo)]),
    "hlx_generation_params_init_sized": (_S, [POINTER(_GenerationParams), c_size_t]),
    "hlx_submit_tokens": (_S, [c_void_p, POINTER(c_int64), c_size_t, POINTER(_GenerationParams),
                               POINTER(c_uint64)]),
    "hlx_submit_text": (_S, [c_void_p, c_char_p, POINTER(_GenerationParams), POINTER(c_uint64)]),
    "hlx_submit_image_bytes": (_S, [c_void_p, c_char_p, POINTER(c_uint8), c_size_t,
                                    POINTER(_GenerationParams), POINTER(c_uint64)]),
    "hlx_cancel": (_S, [c_void_p, c_uint64]),
    "hlx_step": (_S, [c_void_p, POINTER(c_int32)]),
    "hlx_run_until_idle": (_S, [c_void_p]),
    "hlx_poll": (_S, [c_void_p, POINTER(_Event), c_size_t, POINTER(c_size_t)]),
    "hlx_result": (_S, [c_void_p, c_uint64, POINTER(POINTER(_Result))]),
    "hlx_result_free": (None, [POINTER(_Result)]),
    "hlx_result_cached_tokens": (_S, [POINTER(_Result), POINTER(c_int64)]),
    "hlx_result_cached_images": (_S, [POINTER(_Result), POINTER(c_int64)]),
    "hlx_tokenize": (_S, [c_void_p, c_char_p, c_size_t, c_int32, POINTER(c_int64), c_size_t,
                          POINTER(c_size_t)]),
    "hlx_detokenize": (_S, [c_void_p, POINTER(c_int64), c_size_t, c_int32, POINTER(c_void_p),
                            POINTER(c_size_t)]),
    "hlx_string_free": (None, [c_void_p]),
}

_lib = None


def load_library(path: Optional[str] = None) -> ctypes.CDLL:
    """Loads libhlx once (later calls return the same library) and checks its ABI version."""
    global _lib
    if _lib is not None:
        return _lib
    path = path or os.environ.get("HLX_LIBRARY") or f"libhlx.so.{ABI_VERSION}"
    lib = ctypes.CDLL(path)
    lib.hlx_abi_version.restype = c_int
    if lib.hlx_abi_version() != ABI_VERSION:
        raise OSError(f"{path}: ABI version {lib.hlx_abi_version()}, this binding needs {ABI_VERSION}")
    for name, (restype, argtypes) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OSError(f"{path}: no {name}; this binding needs hlx's struct version 2 (hlx.h, 2026)") from None
        fn.restype, fn.argtypes = restype, argtypes
    # The structs declared here must be sizes the library accepts (it writes exactly that many bytes).
    for init, struct in ((lib.hlx_model_options_init_sized, _ModelOptions),
                         (lib.hlx_generation_params_init_sized, _GenerationParams)):
        if init(struct(), ctypes.sizeof(struct)) != OK:
            raise OSError(f"{path}: {lib.hlx_last_error_message().decode()}")
    _lib = lib
    return lib


def version() -> str:
    return load_library().hlx_version().decode()


def _check(status: int) -> None:
    if status != OK:
        lib = load_library()
        raise Error(status, lib.hlx_status_name(status).decode(),
                    lib.hlx_last_error_message().decode("utf-8", "replace"))


def _ids(ids: Sequence[int]):
    return (c_int64 * max(len(ids), 1))(*ids)


class Model:
    """One loaded checkpoint (hlx_model_t); close() or `with` releases it."""

    def __init__(self, model_dir: str, context_capacity: int = CONTEXT_CAPACITY_DEFAULT, slots: int = 1,
                 threads: int = 0, prefix_cache: bool = True, image_cache_mib: int = 256,
                 library: Optional[str] = None):
        self._handle = None
        self._lib = load_library(library)
        opts = _ModelOptions()
        _check(self._lib.hlx_model_options_init_sized(byref(opts), ctypes.sizeof(opts)))
        opts.context_capacity, opts.slots, opts.threads = context_capacity, slots, threads
        opts.prefix_cache, opts.image_cache_mib = int(prefix_cache), image_cache_mib
        handle = c_void_p()
        _check(self._lib.hlx_model_load(os.fsencode(model_dir), byref(opts), byref(handle)))
        self._handle = handle
        self._queued = {}  # request id -> events polled but not yet consumed by stream()

    def close(self) -> None:
        if self._handle:
            self._lib.hlx_model_release(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    @property
    def info(self) -> dict:
        i = _ModelInfo()
        _check(self._lib.hlx_model_info(self._handle, byref(i)))
        return {"context_capacity": i.context_capacity, "slots": i.slots, "vocab_size": i.vocab_size,
                "has_tokenizer": bool(i.has_tokenizer)}

    # -- requests --------------------------------------------------------------------------------

    def submit(self, prompt: Union[str, Sequence[int]], image: Optional[bytes] = None,
               max_new_tokens: int = 16, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
               seed: int = 0, stop: Sequence[str] = (), stop_at_eos: bool = True,
               logit_bias: Optional[dict] = None) -> int:
        """Queues a request (text, token ids, or an encoded PNG/JPEG `image` with a text prompt);
        returns its id. Events go to the poll queue (see stream()). logit_bias: {token id: bias in
        [-100, 100]}, added to those logits before sampling."""
        p = _GenerationParams()
        _check(self._lib.hlx_generation_params_init_sized(byref(p), ctypes.sizeof(p)))
        bias = dict(logit_bias or {})
        bias_ids = (c_int64 * max(len(bias), 1))(*bias.keys())  # copied by the library at submit
        bias_values = (c_float * max(len(bias), 1))(*bias.values())
        p.logit_bias_ids, p.logit_bias_values, p.logit_bias_count = bias_ids, bias_values, len(bias)
        p.max_new_tokens, p.temperature, p.top_k, p.top_p, p.seed = max_new_tokens, temperature, top_k, top_p, seed
        p.stop_at_eos = int(stop_at_eos)
        stops = (c_char_p * max(len(stop), 1))(*[s.encode() for s in stop])
        p.stop, p.stop_count = ctypes.cast(stops, POINTER(c_char_p)), len(stop)
        rid = c_uint64()
        if image is not None:
            buf = (c_uint8 * len(image)).from_buffer_copy(image)
            _check(self._lib.hlx_submit_image_bytes(self._handle, str(prompt).encode(), buf, len(image),
                                                    byref(p), byref(rid)))
        elif isinstance(prompt, str):
            _check(self._lib.hlx_submit_text(self._handle, prompt.encode(), byref(p), byref(rid)))
        else:
            ids = list(prompt)
            _check(self._lib.hlx_submit_tokens(self._handle, _ids(ids), len(ids), byref(p), byref(rid)))
        self._queued[rid.value] = []
        return rid.value

    def cancel(self, request_id: int) -> None:
        _check(self._lib.hlx_cancel(self._handle, request_id))

    def step(self) -> bool:
        """One scheduling step; True when nothing is queued or running afterwards."""
        idle = c_int32()
        _check(self._lib.hlx_step(self._handle, byref(idle)))
        return bool(idle.value)

    def poll(self, capacity: int = 64) -> List[Event]:
        events = (_Event * capacity)()
        n = c_size_t()
        _check(self._lib.hlx_poll(self._handle, events, capacity, byref(n)))
        out = []
        for e in events[:n.value]:  # texts are borrowed until the next poll: copy them now
            text = ctypes.string_at(e.text, e.text_len).decode("utf-8", "replace") if e.text_len else ""
            out.append(Event(e.id, e.kind, e.token, text, e.finish))
        return out

    def stream(self, prompt: Union[str, Sequence[int], None] = None, request_id: Optional[int] = None,
               **params) -> Iterator[Event]:
        """Yields the events of one request (submitting `prompt` with `params` unless an existing
        `request_id` is given), stepping the model as needed; the last event is EVENT_FINISHED.
        The caller may cancel() the request between events."""
        rid = request_id if request_id is not None else self.submit(prompt, **params)
        while True:
            queue = self._queued.setdefault(rid, [])
            while queue:
                event = queue.pop(0)
                yield event
                if event.kind == EVENT_FINISHED:
                    del self._queued[rid]
                    return
            polled = self.poll()
            if not polled:
                idle = self.step()
                polled = self.poll()
                if idle and not polled:  # finished earlier and its events were already taken
                    raise Error(NOT_FOUND, "not_found", f"request {rid} has no events left")
            for e in polled:
                self._queued.setdefault(e.id, []).append(e)

    def result(self, request_id: int) -> Result:
        """The finished request's tokens and text (once per request)."""
        r = POINTER(_Result)()
        _check(self._lib.hlx_result(self._handle, request_id, byref(r)))
        try:
            c = r.contents
            text = ctypes.string_at(c.text, c.text_len).decode("utf-8", "replace") if c.text_len else ""
            cached, images = c_int64(), c_int64()
            _check(self._lib.hlx_result_cached_tokens(r, byref(cached)))
            _check(self._lib.hlx_result_cached_images(r, byref(images)))
            return Result(c.id, c.finish, list(c.tokens[:c.token_count]), text, c.prompt_tokens, cached.value,
                          images.value)
        finally:
            self._lib.hlx_result_free(r)

    def generate(self, prompt: Union[str, Sequence[int]], **params) -> Result:
        rid = self.submit(prompt, **params)
        for _ in self.stream(request_id=rid):
            pass
        return self.result(rid)

    # -- tokenizer -------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special_tokens: bool = False) -> List[int]:
        data = text.encode()
        n = c_size_t()
        status = self._lib.hlx_tokenize(self._handle, data, len(data), int(add_special_tokens), None, 0, byref(n))
        if status not in (OK, 6):  # 6: HLX_STATUS_OUT_OF_RANGE = "give a larger buffer"
            _check(status)
        ids = (c_int64 * max(n.value, 1))()
        _check(self._lib.hlx_tokenize(self._handle, data, len(data), int(add_special_tokens), ids, n.value, byref(n)))
        return list(ids[:n.value])

    def detokenize(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        out, n = c_void_p(), c_size_t()
        _check(self._lib.hlx_detokenize(self._handle, _ids(ids), len(ids), int(skip_special_tokens),
                                        byref(out), byref(n)))
        try:
            return ctypes.string_at(out, n.value).decode("utf-8", "replace")
        finally:
            self._lib.hlx_string_free(out)
