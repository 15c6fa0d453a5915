-- The plugin's options: defaults, what setup() was given, and which buffers they enable.

local M = {}

M.defaults = {
  cmd = nil, -- { "/path/to/codespec", "lsp" }; default: found by `client.find_server`
  debounce_ms = 150, -- settings.debounceMs, when given, wins
  enabled = true,
  disabled_filetypes = {},
  filetypes = nil, -- nil: every buffer with a file
  -- while a completion menu is open (the built-in popup menu, nvim-cmp, blink.cmp): hide the
  -- ghost text and show it again when the menu closes (true, as copilot.lua does), or show both
  -- (false); either way the menu keeps <Tab> while it is open
  hide_during_completion = true,
  keymaps = {
    accept = "<Tab>",
    accept_word = "<M-Right>",
    accept_line = "<M-Down>",
    dismiss = "<C-]>",
    trigger = "<M-\\>",
  },
  -- next edits (Normal mode): asked once an edit settles and the cursor rests ``delay_ms``;
  -- ``accept`` jumps to the edit shown, then applies it; ``dismiss`` drops it
  next_edits = { enabled = true, delay_ms = 500, accept = "<Tab>", dismiss = "<Esc>" },
  settings = {}, -- passed as initializationOptions (keys of lsp/settings.schema.json)
}

M.options = vim.deepcopy(M.defaults)

function M.setup(options)
  M.options = vim.tbl_deep_extend("force", vim.deepcopy(M.defaults), options or {})
  return M.options
end

--- Whether completions are on in ``bufnr`` (globally, and for its filetype).
function M.enabled_in(bufnr)
  local o, ft = M.options, vim.bo[bufnr].filetype
  if not o.enabled or vim.tbl_contains(o.disabled_filetypes, ft) then
    return false
  end
  return o.filetypes == nil or vim.tbl_contains(o.filetypes, ft)
end

--- Milliseconds to wait after a keystroke before asking.
function M.debounce_ms()
  return tonumber((M.options.settings or {}).debounceMs) or M.options.debounce_ms
end

--- Turn completions off or on, everywhere or for one filetype.
function M.toggle(filetype)
  local o = M.options
  if filetype and filetype ~= "" then
    if vim.tbl_contains(o.disabled_filetypes, filetype) then
      o.disabled_filetypes = vim.tbl_filter(function(f)
        return f ~= filetype
      end, o.disabled_filetypes)
    else
      table.insert(o.disabled_filetypes, filetype)
    end
  else
    o.enabled = not o.enabled
  end
end

--- Merge server settings (keys of lsp/settings.schema.json) into the options; returns them all.
function M.merge_settings(settings)
  M.options.settings = vim.tbl_deep_extend("force", M.options.settings or {}, settings or {})
  return M.options.settings
end

return M
