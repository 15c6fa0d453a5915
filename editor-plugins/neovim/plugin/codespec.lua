-- Nothing starts until require("codespec").setup({...}) is called.
if vim.g.loaded_codespec then
  return
end
vim.g.loaded_codespec = true
