"""``torch.nn.modules.module``'s names: ``Module`` and the hooks every module runs
(``tapegrad/nn/module.py``)."""
from ..module import (
    Module,
    register_module_buffer_registration_hook,
    register_module_forward_hook,
    register_module_forward_pre_hook,
    register_module_full_backward_hook,
    register_module_full_backward_pre_hook,
    register_module_module_registration_hook,
    register_module_parameter_registration_hook,
)
from ._absent import absent

__all__ = ["Module", "register_module_forward_pre_hook", "register_module_forward_hook",
           "register_module_full_backward_pre_hook", "register_module_full_backward_hook",
           "register_module_buffer_registration_hook",
           "register_module_module_registration_hook",
           "register_module_parameter_registration_hook"]
__getattr__ = absent(__name__, ["register_module_backward_hook"])
