-- Completion menus: whether one is open (the built-in popup menu, nvim-cmp, blink.cmp), and
-- telling the suggestion when one opens or closes, so that ghost text hides while a menu is
-- open and comes back when it closes (`hide_during_completion`, as copilot.lua does).

local M = {}

--- Whether the completion plugin loaded as ``name`` says (by its function ``method``) that its
--- menu is open; false when it is not loaded.
local function plugin_menu_open(name, method)
  local plugin = package.loaded[name]
  if not plugin or type(plugin[method]) ~= "function" then
    return false
  end
  local ok, open = pcall(plugin[method])
  return ok and open == true
end

--- Whether a completion menu is open now.
function M.visible()
  return vim.fn.pumvisible() == 1 or plugin_menu_open("cmp", "visible") or plugin_menu_open("blink.cmp", "is_visible")
end

--- Call ``changed(open)`` when a menu opens or closes: the built-in menu's events, blink.cmp's
--- User events, and nvim-cmp's own event hooks (when it is loaded, now or later).
function M.watch(group, changed)
  local function on(event, pattern, open)
    vim.api.nvim_create_autocmd(event, {
      group = group,
      pattern = pattern,
      callback = function()
        -- (CompleteDone comes while the menu is still up: look once it is gone)
        vim.schedule(function()
          changed(open)
        end)
      end,
    })
  end
  on("CompleteChanged", "*", true)
  on("CompleteDone", "*", false)
  on("User", "BlinkCmpMenuOpen", true)
  on("User", "BlinkCmpMenuClose", false)
  local hooked = false
  local function hook_cmp()
    local cmp = package.loaded["cmp"]
    if hooked or not cmp or not cmp.event or type(cmp.event.on) ~= "function" then
      return
    end
    hooked = true
    cmp.event:on("menu_opened", function()
      changed(true)
    end)
    cmp.event:on("menu_closed", function()
      vim.schedule(function()
        changed(false)
      end)
    end)
  end
  hook_cmp()
  vim.api.nvim_create_autocmd("InsertEnter", { group = group, callback = hook_cmp })
end

return M
